package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static weir.jms.Jms.receiveText;
import static weir.jms.Jms.unique;

import jakarta.jms.Connection;
import jakarta.jms.InvalidClientIDException;
import jakarta.jms.JMSSecurityException;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import org.apache.qpid.jms.JmsConnectionFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Login, ClientID uniqueness (sole-connection-for-container) and refused credentials. */
class ConnectionTest {
  @RegisterExtension static final WeirBroker broker = new WeirBroker();

  @Test
  void connects_with_a_client_id_and_exchanges_a_message() throws Exception {
    String id = unique("client");
    Connection c = broker.connectWithClientId(id);
    assertEquals(id, c.getClientID());
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = s.createQueue(unique("conn.q"));
    Jms.sendTexts(s, q, "hello");
    assertEquals("hello", receiveText(s.createConsumer(q)));
  }

  @Test
  void a_second_connection_with_the_same_client_id_is_refused() throws Exception {
    String id = unique("dup");
    Connection first = broker.connectWithClientId(id);
    first.createSession(false, Session.AUTO_ACKNOWLEDGE);

    Connection second = broker.factory().createConnection();
    try {
      assertThrows(
          InvalidClientIDException.class,
          () -> {
            second.setClientID(id);
            second.start();
            second.createSession(false, Session.AUTO_ACKNOWLEDGE);
          });
    } finally {
      WeirBroker.closeQuietly(second);
    }

    // The first one is unaffected, and once it is gone the id is free again.
    Session s = first.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = s.createQueue(unique("dup.q"));
    Jms.sendTexts(s, q, "still here");
    assertEquals("still here", receiveText(s.createConsumer(q)));
    first.close();
    Connection third = broker.connectWithClientId(id);
    third.createSession(false, Session.AUTO_ACKNOWLEDGE).close();
  }

  @Test
  void a_wrong_password_is_a_security_exception() {
    JmsConnectionFactory cf =
        new JmsConnectionFactory(WeirBroker.USER, "wrong-password", broker.amqpUri());
    assertThrows(
        JMSSecurityException.class,
        () -> {
          try (Connection c = cf.createConnection()) {
            c.start();
            c.createSession(false, Session.AUTO_ACKNOWLEDGE);
          }
        });
  }

  @Test
  void an_unknown_user_is_a_security_exception() {
    JmsConnectionFactory cf = new JmsConnectionFactory("nobody", "x", broker.amqpUri());
    assertThrows(
        JMSSecurityException.class,
        () -> {
          try (Connection c = cf.createConnection()) {
            c.start();
            c.createSession(false, Session.AUTO_ACKNOWLEDGE);
          }
        });
  }
}
