package weir.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static weir.jms.Jms.receive;
import static weir.jms.Jms.unique;

import jakarta.jms.BytesMessage;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * STOMP in, JMS (AMQP) out and the reverse: body, correlation id, user headers as properties and
 * the group id survive the crossing. The STOMP side is a raw socket (RawStomp).
 */
class CrossProtocolTest {
  @RegisterExtension static final WeirBroker broker = new WeirBroker();

  private static RawStomp stomp() throws Exception {
    RawStomp s = new RawStomp(broker.stompPort());
    s.connect(WeirBroker.USER, WeirBroker.PASSWORD);
    return s;
  }

  @Test
  void stomp_text_send_is_received_by_jms() throws Exception {
    String name = unique("x.q");
    Session session = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageConsumer consumer = session.createConsumer(session.createQueue(name));
    try (RawStomp stomp = stomp()) {
      Map<String, String> h = new LinkedHashMap<>();
      h.put("content-type", "text/plain");
      h.put("correlation-id", "corr-42");
      h.put("JMSXGroupID", "group-A");
      h.put("colour", "blue");
      h.put("note", "a:b\nc\\d"); // escaped on the wire (STOMP 1.2)
      h.put("persistent", "true");
      h.put("priority", "7");
      stomp.sendMessage("/queue/" + name, h, "héllo from STOMP".getBytes(StandardCharsets.UTF_8));
    }
    Message m = receive(consumer);
    TextMessage text = assertInstanceOf(TextMessage.class, m, "text/plain STOMP body");
    assertEquals("héllo from STOMP", text.getText());
    assertEquals("corr-42", m.getJMSCorrelationID());
    assertEquals("group-A", m.getStringProperty("JMSXGroupID"));
    assertEquals("blue", m.getStringProperty("colour"));
    assertEquals("a:b\nc\\d", m.getStringProperty("note"));
    assertEquals(DeliveryMode.PERSISTENT, m.getJMSDeliveryMode());
    assertEquals(7, m.getJMSPriority());
    assertEquals(name, ((Queue) m.getJMSDestination()).getQueueName());
  }

  @Test
  void stomp_binary_send_is_a_jms_bytes_message() throws Exception {
    String name = unique("x.q");
    Session session = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageConsumer consumer = session.createConsumer(session.createQueue(name));
    byte[] body = {0, 1, 2, (byte) 0xff, 0, 42};
    try (RawStomp stomp = stomp()) {
      stomp.sendMessage(
          "/queue/" + name, Map.of("content-type", "application/octet-stream"), body);
    }
    BytesMessage m = assertInstanceOf(BytesMessage.class, receive(consumer));
    byte[] back = new byte[(int) m.getBodyLength()];
    m.readBytes(back);
    assertArrayEquals(body, back);
  }

  @Test
  void jms_text_send_is_received_over_stomp() throws Exception {
    String name = unique("x.q");
    try (RawStomp stomp = stomp()) {
      stomp.subscribe("/queue/" + name, "sub-1");
      Session session = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
      try (MessageProducer p = session.createProducer(session.createQueue(name))) {
        TextMessage m = session.createTextMessage("héllo from JMS");
        m.setJMSCorrelationID("corr-7");
        m.setStringProperty("JMSXGroupID", "group-B");
        m.setStringProperty("colour", "green");
        m.setIntProperty("count", 3);
        p.send(m, DeliveryMode.PERSISTENT, 8, 0);
      }
      RawStomp.Frame f = stomp.receive((int) Jms.RECEIVE_MS);
      assertNotNull(f, "no MESSAGE over STOMP");
      assertEquals("MESSAGE", f.command(), () -> "frame: " + f.headers() + " " + f.text());
      assertEquals("héllo from JMS", f.text());
      assertEquals("/queue/" + name, f.header("destination"));
      assertEquals("sub-1", f.header("subscription"));
      assertEquals("corr-7", f.header("correlation-id"));
      assertEquals("group-B", f.header("JMSXGroupID"));
      assertEquals("green", f.header("colour"));
      assertEquals("3", f.header("count"));
      assertEquals("8", f.header("priority"));
      assertEquals("true", f.header("persistent"));
    }
  }

  @Test
  void jms_bytes_published_to_a_topic_reach_a_stomp_subscriber() throws Exception {
    String name = unique("x.t");
    byte[] body = {9, 0, 8, 0, 7};
    try (RawStomp stomp = stomp()) {
      stomp.subscribe("/topic/" + name, "sub-t");
      Session session = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
      Topic topic = session.createTopic(name);
      try (MessageProducer p = session.createProducer(topic)) {
        BytesMessage m = session.createBytesMessage();
        m.writeBytes(body);
        p.send(m);
      }
      RawStomp.Frame f = stomp.receive((int) Jms.RECEIVE_MS);
      assertNotNull(f, "no MESSAGE over STOMP");
      assertEquals("MESSAGE", f.command());
      assertEquals("/topic/" + name, f.header("destination"));
      assertArrayEquals(body, f.body());
    }
  }

  @Test
  void stomp_reply_to_a_jms_temporary_queue() throws Exception {
    // A JMS requester, a STOMP responder: the reply-to header carries the temporary queue.
    String service = unique("x.service");
    Session session = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    var replies = session.createTemporaryQueue();
    MessageConsumer replyConsumer = session.createConsumer(replies);
    try (RawStomp stomp = stomp()) {
      stomp.subscribe("/queue/" + service, "svc");
      try (MessageProducer p = session.createProducer(session.createQueue(service))) {
        TextMessage req = session.createTextMessage("question");
        req.setJMSReplyTo(replies);
        req.setJMSCorrelationID("q-1");
        p.send(req);
      }
      RawStomp.Frame f = stomp.receive((int) Jms.RECEIVE_MS);
      assertNotNull(f, "request not delivered over STOMP");
      String replyTo = f.header("reply-to");
      assertNotNull(replyTo, () -> "no reply-to in " + f.headers());
      stomp.sendMessage(
          replyTo,
          Map.of("correlation-id", f.header("correlation-id"), "content-type", "text/plain"),
          "answer".getBytes(StandardCharsets.UTF_8));
    }
    Message reply = receive(replyConsumer);
    assertEquals("answer", ((TextMessage) reply).getText());
    assertEquals("q-1", reply.getJMSCorrelationID());
  }
}
