package weir.jms;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestWatcher;

/**
 * A real {@code weir serve} process for one test class, registered with
 * {@code @RegisterExtension static final WeirBroker broker = new WeirBroker(config);}.
 *
 * <p>It owns a temp dir with the config file, the data dir and the log. Ports are picked free on
 * 127.0.0.1 and kept across {@link #restartAfterCrash()}, so clients reconnect to the same address
 * after a {@code kill -9} on the same data dir. Connections opened through {@link #connect} are
 * closed after each test, and a failed test prints the broker's log tail: its side of the story.
 */
public final class WeirBroker
    implements BeforeAllCallback, AfterAllCallback, AfterEachCallback, TestWatcher {

  public static final String USER = "admin";
  public static final String PASSWORD = "secret";

  /** Users for every broker; a test class appends its own settings. */
  public static final String BASE_CONFIG =
      """
      [[users]]
      name = "%s"
      password = "%s"

      [[users]]
      name = "guest"
      password = "guest"
      """
          .formatted(USER, PASSWORD);

  private static final long START_TIMEOUT_MS = 30_000;

  private final String configBody;
  private final List<Connection> opened = new ArrayList<>();
  private Path dir;
  private Path dataDir;
  private Path logPath;
  private int stompPort;
  private int amqpPort;
  private Process process;
  private int starts;

  public WeirBroker() {
    this("");
  }

  /** {@code extraConfig} is TOML appended to {@link #BASE_CONFIG}. */
  public WeirBroker(String extraConfig) {
    this.configBody = BASE_CONFIG + "\n" + extraConfig;
  }

  // ---- JUnit lifecycle ----

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    dir = Files.createTempDirectory("weir-jms-");
    dataDir = dir.resolve("data");
    Files.createDirectories(dataDir);
    Path config = dir.resolve("weir.toml");
    Files.writeString(
        config,
        "[broker]\ndata_dir = \"" + dataDir + "\"\n" + configBody,
        StandardCharsets.UTF_8);
    logPath = dir.resolve("weir.log");
    stompPort = freePort();
    amqpPort = freePort();
    start();
  }

  @Override
  public void afterEach(ExtensionContext context) {
    closeConnections();
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    closeConnections();
    stop();
    deleteRecursively(dir);
  }

  @Override
  public void testFailed(ExtensionContext context, Throwable cause) {
    String state = alive() ? "alive" : "exited " + (process == null ? "-" : process.exitValue());
    System.out.printf(
        "%n--- %s: broker (%s) log tail ---%n%s%n",
        context.getDisplayName(), state, logTail(40));
  }

  // ---- process control ----

  public synchronized void start() throws IOException, InterruptedException {
    String bin = System.getProperty("weir.bin");
    if (bin == null || !Files.isExecutable(Path.of(bin))) {
      throw new IllegalStateException(
          "broker binary '" + bin + "' is missing or not executable: pass -Dweir.bin=/path/to/weir");
    }
    starts++;
    Files.writeString(
        logPath,
        "\n===== start #" + starts + " =====\n",
        StandardCharsets.UTF_8,
        java.nio.file.StandardOpenOption.CREATE,
        java.nio.file.StandardOpenOption.APPEND);
    ProcessBuilder pb =
        new ProcessBuilder(
            bin,
            "serve",
            "--config", dir.resolve("weir.toml").toString(),
            "--data-dir", dataDir.toString(),
            "--stomp", "127.0.0.1:" + stompPort,
            "--amqp", "127.0.0.1:" + amqpPort,
            // Off: brokers of parallel tests would contend for the default port.
            "--http", "off",
            "--log", System.getProperty("weir.log", "info"));
    pb.redirectErrorStream(true);
    pb.redirectOutput(ProcessBuilder.Redirect.appendTo(logPath.toFile()));
    pb.redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
    process = pb.start();
    waitForPort(stompPort);
    waitForPort(amqpPort);
  }

  /** Simulates a crash: SIGKILL, no chance to flush anything. */
  public synchronized void kill9() throws InterruptedException {
    if (process != null && process.isAlive()) {
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
    }
  }

  /** {@code kill -9}, then start again on the same data dir and ports. */
  public void restartAfterCrash() throws IOException, InterruptedException {
    closeConnections();
    kill9();
    start();
  }

  public synchronized void stop() throws InterruptedException {
    if (process == null || !process.isAlive()) {
      return;
    }
    process.destroy();
    if (!process.waitFor(10, TimeUnit.SECONDS)) {
      process.destroyForcibly();
      process.waitFor(10, TimeUnit.SECONDS);
    }
  }

  public synchronized boolean alive() {
    return process != null && process.isAlive();
  }

  /** Waits until the broker listens on {@code port} (an extra listener of the config). */
  public void waitForPort(int port) throws InterruptedException {
    long deadline = System.currentTimeMillis() + START_TIMEOUT_MS;
    while (System.currentTimeMillis() < deadline) {
      if (!process.isAlive()) {
        throw new IllegalStateException(
            "broker exited with code "
                + process.exitValue()
                + " before listening on "
                + port
                + "; log:\n"
                + logTail(40));
      }
      try (Socket s = new Socket()) {
        s.connect(new InetSocketAddress("127.0.0.1", port), 500);
        return;
      } catch (IOException notYet) {
        Thread.sleep(50);
      }
    }
    throw new IllegalStateException(
        "broker not listening on " + port + " after " + START_TIMEOUT_MS + " ms; log:\n" + logTail(40));
  }

  public String logTail(int lines) {
    try {
      List<String> all = Files.readAllLines(logPath, StandardCharsets.UTF_8);
      return String.join("\n", all.subList(Math.max(0, all.size() - lines), all.size()));
    } catch (IOException | UncheckedIOException e) {
      return "(no log: " + e + ")";
    }
  }

  // ---- clients ----

  public int amqpPort() {
    return amqpPort;
  }

  public int stompPort() {
    return stompPort;
  }

  /**
   * The Qpid JMS URI of this broker. Timeouts are bounded so a broker that never answers fails the
   * test instead of hanging it; {@code options} are more {@code key=value} URI options.
   */
  public String amqpUri(String... options) {
    StringBuilder uri =
        new StringBuilder("amqp://127.0.0.1:")
            .append(amqpPort)
            .append("?jms.connectTimeout=10000&jms.requestTimeout=15000&jms.closeTimeout=5000");
    for (String option : options) {
      uri.append('&').append(option);
    }
    return uri.toString();
  }

  public JmsConnectionFactory factory(String... options) {
    return new JmsConnectionFactory(USER, PASSWORD, amqpUri(options));
  }

  /** A started connection as {@link #USER}, closed after the test. */
  public Connection connect(String... options) throws JMSException {
    return track(factory(options).createConnection());
  }

  /** A started connection with a ClientID (needed for durable subscriptions). */
  public Connection connectWithClientId(String clientId, String... options) throws JMSException {
    Connection c = factory(options).createConnection();
    try {
      c.setClientID(clientId);
    } catch (JMSException e) {
      closeQuietly(c);
      throw e;
    }
    return track(c);
  }

  /** Registers a connection to be closed after the test, and starts it. */
  public synchronized Connection track(Connection c) throws JMSException {
    opened.add(c);
    c.start();
    return c;
  }

  private synchronized void closeConnections() {
    for (Connection c : opened) {
      closeQuietly(c);
    }
    opened.clear();
  }

  static void closeQuietly(Connection c) {
    try {
      c.close();
    } catch (JMSException | RuntimeException ignored) {
      // Closing after a crash or a refused login may fail; the test has already said its piece.
    }
  }

  // ---- helpers ----

  private static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
      return s.getLocalPort();
    }
  }

  private static void deleteRecursively(Path root) throws IOException {
    if (root == null || !Files.exists(root)) {
      return;
    }
    try (Stream<Path> walk = Files.walk(root)) {
      for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
        Files.deleteIfExists(p);
      }
    }
  }
}
