package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static weir.jms.Jms.receiveText;
import static weir.jms.Jms.unique;

import jakarta.jms.Connection;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Qpid JMS over {@code amqps://} with SCRAM-SHA-256. The broker's certificate is made here with
 * openssl, signed by a test CA that a PKCS12 truststore made with keytool trusts.
 */
class TlsTest {
  private static final String TRUST_PASSWORD = "changeit";
  private static final Path CERTS = makeCerts();
  private static final int AMQPS_PORT = freePort();

  @RegisterExtension
  static final WeirBroker broker =
      new WeirBroker(
          """
          [tls]
          cert_file = "%s"
          key_file = "%s"

          [[acceptors.extra]]
          name = "amqps"
          bind = "127.0.0.1:%d"
          protocols = ["amqp"]
          tls = true
          """
              .formatted(CERTS.resolve("server.pem"), CERTS.resolve("server.key"), AMQPS_PORT));

  @Test
  void qpid_jms_over_amqps_with_scram_sha_256() throws Exception {
    broker.waitForPort(AMQPS_PORT);
    String uri =
        "amqps://localhost:"
            + AMQPS_PORT
            + "?transport.trustStoreLocation="
            + CERTS.resolve("trust.p12")
            + "&transport.trustStorePassword="
            + TRUST_PASSWORD
            + "&transport.trustStoreType=PKCS12"
            + "&amqp.saslMechanisms=SCRAM-SHA-256"
            + "&jms.connectTimeout=10000&jms.requestTimeout=15000&jms.closeTimeout=5000";
    JmsConnectionFactory factory =
        new JmsConnectionFactory(WeirBroker.USER, WeirBroker.PASSWORD, uri);
    Connection c = broker.track(factory.createConnection());
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = s.createQueue(unique("amqps.q"));
    Jms.sendTexts(s, q, "over TLS");
    assertEquals("over TLS", receiveText(s.createConsumer(q)));
  }

  // ---- certificates ----

  private static Path makeCerts() {
    try {
      Path dir = Files.createTempDirectory("weir-jms-tls-");
      run(dir, "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
          "-subj", "/CN=Weir test CA", "-keyout", "ca.key", "-out", "ca.pem",
          "-addext", "basicConstraints=critical,CA:TRUE",
          "-addext", "keyUsage=critical,keyCertSign,cRLSign");
      run(dir, "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
          "-keyout", "server.key", "-out", "server.csr");
      Files.writeString(
          dir.resolve("server.ext"),
          "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
      run(dir, "openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
          "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem");
      run(dir, "keytool", "-importcert", "-noprompt", "-alias", "weir-test-ca", "-file", "ca.pem",
          "-keystore", "trust.p12", "-storetype", "PKCS12", "-storepass", TRUST_PASSWORD);
      return dir;
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void run(Path dir, String... command) throws IOException {
    Process p =
        new ProcessBuilder(List.of(command)).directory(dir.toFile()).redirectErrorStream(true).start();
    String output = new String(p.getInputStream().readAllBytes());
    try {
      if (p.waitFor() != 0) {
        throw new IOException(String.join(" ", command) + " failed:\n" + output);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException(e);
    }
  }

  private static int freePort() {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
