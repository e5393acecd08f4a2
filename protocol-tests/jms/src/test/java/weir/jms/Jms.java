package weir.jms;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/** Small shared helpers for the JMS tests. */
final class Jms {
  /** How long a message that should arrive may take. */
  static final long RECEIVE_MS = 5_000;
  /** How long to watch for a message that should not arrive. */
  static final long QUIET_MS = 1_000;

  private Jms() {}

  static String unique(String prefix) {
    return prefix + "-" + UUID.randomUUID().toString().substring(0, 12);
  }

  static Message receive(MessageConsumer consumer) throws JMSException {
    Message m = consumer.receive(RECEIVE_MS);
    assertNotNull(m, "no message within " + RECEIVE_MS + " ms");
    return m;
  }

  static String receiveText(MessageConsumer consumer) throws JMSException {
    return ((TextMessage) receive(consumer)).getText();
  }

  static void assertNothing(MessageConsumer consumer) throws JMSException {
    Message m = consumer.receive(QUIET_MS);
    assertNull(m, () -> "unexpected message: " + describe(m));
  }

  static String describe(Message m) {
    if (m == null) {
      return "null";
    }
    try {
      String body = m instanceof TextMessage t ? t.getText() : m.getClass().getSimpleName();
      return body + " group=" + m.getStringProperty("JMSXGroupID") + " id=" + m.getJMSMessageID();
    } catch (JMSException e) {
      return m.toString();
    }
  }

  static void sendTexts(Session session, jakarta.jms.Destination dest, String... texts)
      throws JMSException {
    try (var producer = session.createProducer(dest)) {
      for (String t : texts) {
        producer.send(session.createTextMessage(t));
      }
    }
  }

  /**
   * Collects what a consumer's MessageListener is given, so a test can watch several consumers at
   * once and wait for totals.
   */
  static final class Collector {
    final String name;
    /** The connection the consumer lives on, when the test owns one per consumer. */
    jakarta.jms.Connection connection;
    final List<Message> received = new CopyOnWriteArrayList<>();
    private final BlockingQueue<Message> arrivals = new LinkedBlockingQueue<>();

    Collector(String name, MessageConsumer consumer) throws JMSException {
      this.name = name;
      consumer.setMessageListener(
          m -> {
            received.add(m);
            arrivals.add(m);
          });
    }

    Message next(long timeoutMs) throws InterruptedException {
      return arrivals.poll(timeoutMs, TimeUnit.MILLISECONDS);
    }

    List<Message> snapshot() {
      return new ArrayList<>(received);
    }

    @Override
    public String toString() {
      return name;
    }
  }

  /** Waits until the collectors together hold {@code total} messages or the time is up. */
  static int awaitTotal(int total, long timeoutMs, Collector... collectors)
      throws InterruptedException {
    long deadline = System.currentTimeMillis() + timeoutMs;
    int n = 0;
    while (System.currentTimeMillis() < deadline) {
      n = 0;
      for (Collector c : collectors) {
        n += c.received.size();
      }
      if (n >= total) {
        return n;
      }
      Thread.sleep(20);
    }
    return n;
  }
}
