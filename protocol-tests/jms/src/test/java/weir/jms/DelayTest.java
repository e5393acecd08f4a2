package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static weir.jms.Jms.assertNothing;
import static weir.jms.Jms.receive;
import static weir.jms.Jms.unique;

import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Delayed delivery through JMS 2.0 (Qpid JMS sends {@code setDeliveryDelay} as the
 * x-opt-delivery-time annotation) and through queues configured with a default delay.
 */
class DelayTest {
  /** Clock granularity between the client's and the broker's millisecond clocks. */
  static final long SLACK_MS = 2;
  /** Generous: the machine is shared, so lateness bounds only catch "never" or "way late". */
  static final long LATE_MS = 3_000;

  @RegisterExtension
  static final WeirBroker broker =
      new WeirBroker(
          """
          [[queues]]
          name = "slow"
          default_message_delay = "1s"

          [address_settings."slow.*"]
          default_message_delay = "1s"
          """);

  private Session session() throws Exception {
    return broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
  }

  /** Receives one text and returns ms since {@code sentAt}, checking the text. */
  private static long elapsedUntil(MessageConsumer c, String text, long sentAt) throws Exception {
    Message m = c.receive(Jms.RECEIVE_MS + LATE_MS);
    long elapsed = System.currentTimeMillis() - sentAt;
    assertTrue(m != null, "'" + text + "' never delivered");
    assertEquals(text, ((TextMessage) m).getText());
    return elapsed;
  }

  @Test
  void delivery_delay_holds_the_message_for_at_least_that_long() throws Exception {
    Session s = session();
    Queue q = s.createQueue(unique("delay.q"));
    MessageConsumer consumer = s.createConsumer(q);
    MessageProducer delayed = s.createProducer(q);
    delayed.setDeliveryDelay(1500);
    MessageProducer now = s.createProducer(q);

    long sentAt = System.currentTimeMillis();
    TextMessage late = s.createTextMessage("late");
    delayed.send(late);
    now.send(s.createTextMessage("now"));

    // The undelayed message is not held up behind the delayed one.
    assertEquals("now", ((TextMessage) receive(consumer)).getText());
    long elapsed = elapsedUntil(consumer, "late", sentAt);
    assertTrue(elapsed >= 1500 - SLACK_MS, "delivered after " + elapsed + " ms, asked for 1500");
    assertTrue(elapsed < 1500 + LATE_MS, "delivered after " + elapsed + " ms, asked for 1500");
    assertTrue(late.getJMSDeliveryTime() >= sentAt + 1500);
  }

  @Test
  void queue_default_delay_applies_to_plain_sends() throws Exception {
    Session s = session();
    Queue q = s.createQueue("slow");
    MessageConsumer consumer = s.createConsumer(q);
    long sentAt = System.currentTimeMillis();
    Jms.sendTexts(s, q, "plain");
    long elapsed = elapsedUntil(consumer, "plain", sentAt);
    assertTrue(elapsed >= 1000 - SLACK_MS, "default delay 1s, delivered after " + elapsed + " ms");
  }

  @Test
  void queue_default_delay_by_address_pattern() throws Exception {
    Session s = session();
    Queue q = s.createQueue("slow." + unique("p"));
    MessageConsumer consumer = s.createConsumer(q);
    long sentAt = System.currentTimeMillis();
    Jms.sendTexts(s, q, "plain");
    long elapsed = elapsedUntil(consumer, "plain", sentAt);
    assertTrue(elapsed >= 1000 - SLACK_MS, "default delay 1s, delivered after " + elapsed + " ms");
  }

  @Test
  void per_message_delay_overrides_the_queue_default() throws Exception {
    Session s = session();
    Queue q = s.createQueue("slow." + unique("o"));
    MessageConsumer consumer = s.createConsumer(q);
    MessageProducer p = s.createProducer(q);
    p.setDeliveryDelay(200);
    long sentAt = System.currentTimeMillis();
    p.send(s.createTextMessage("shorter"));
    long elapsed = elapsedUntil(consumer, "shorter", sentAt);
    assertTrue(elapsed >= 200 - SLACK_MS, "asked 200 ms, got " + elapsed);
    assertTrue(elapsed < 900, "the queue's 1s default was applied instead of 200 ms: " + elapsed);
  }

  @Test
  void explicit_zero_delay_property_overrides_the_queue_default() throws Exception {
    // setDeliveryDelay(0) sends no annotation at all, so an explicit 0 goes as the
    // Artemis property (the same names as the STOMP headers are honoured over AMQP).
    Session s = session();
    Queue q = s.createQueue("slow." + unique("z"));
    MessageConsumer consumer = s.createConsumer(q);
    TextMessage m = s.createTextMessage("at once");
    m.setLongProperty("AMQ_SCHEDULED_DELAY", 0);
    long sentAt = System.currentTimeMillis();
    try (MessageProducer p = s.createProducer(q)) {
      p.send(m);
    }
    long elapsed = elapsedUntil(consumer, "at once", sentAt);
    assertTrue(elapsed < 800, "explicit 0 delay, delivered after " + elapsed + " ms");
  }

  @Test
  void time_to_live_shorter_than_the_delay_is_never_delivered() throws Exception {
    Session s = session();
    Queue q = s.createQueue(unique("ttl.q"));
    MessageConsumer consumer = s.createConsumer(q);
    MessageProducer expiring = s.createProducer(q);
    expiring.setDeliveryDelay(1500);
    expiring.setTimeToLive(500);
    MessageProducer keeping = s.createProducer(q);
    keeping.setDeliveryDelay(1500);

    long sentAt = System.currentTimeMillis();
    expiring.send(s.createTextMessage("expires first"));
    keeping.send(s.createTextMessage("survives"));
    long elapsed = elapsedUntil(consumer, "survives", sentAt);
    assertTrue(elapsed >= 1500 - SLACK_MS);
    assertNothing(consumer);
  }

  @Test
  void durable_delayed_message_survives_kill_9() throws Exception {
    String name = unique("delay.crash");
    Session s = session();
    Queue q = s.createQueue(name);
    MessageProducer p = s.createProducer(q);
    p.setDeliveryMode(DeliveryMode.PERSISTENT);
    p.setDeliveryDelay(2500);
    long sentAt = System.currentTimeMillis();
    p.send(s.createTextMessage("after the crash"));
    broker.restartAfterCrash();

    Session again = session();
    MessageConsumer consumer = again.createConsumer(again.createQueue(name));
    long elapsed = elapsedUntil(consumer, "after the crash", sentAt);
    assertTrue(elapsed >= 2500 - SLACK_MS, "delivered after " + elapsed + " ms, asked for 2500");
    assertNothing(consumer);
  }
}
