package weir.jms;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static weir.jms.Jms.assertNothing;
import static weir.jms.Jms.receive;
import static weir.jms.Jms.receiveText;
import static weir.jms.Jms.unique;

import jakarta.jms.BytesMessage;
import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.MapMessage;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.ObjectMessage;
import jakarta.jms.Queue;
import jakarta.jms.QueueBrowser;
import jakarta.jms.Session;
import jakarta.jms.StreamMessage;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Point-to-point and publish/subscribe basics, message types, browsing, selectors, acks, tx. */
class MessagingTest {
  @RegisterExtension static final WeirBroker broker = new WeirBroker();

  private Connection connection;
  private Session session;
  private Queue queue;

  @BeforeEach
  void open() throws Exception {
    connection = broker.connect();
    session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
    queue = session.createQueue(unique("msg.q"));
  }

  @Test
  void queue_send_and_receive_in_order() throws Exception {
    MessageConsumer consumer = session.createConsumer(queue);
    Jms.sendTexts(session, queue, "one", "two", "three");
    assertEquals("one", receiveText(consumer));
    assertEquals("two", receiveText(consumer));
    assertEquals("three", receiveText(consumer));
    assertNothing(consumer);
  }

  @Test
  void queue_message_sent_before_the_consumer_exists_waits_for_it() throws Exception {
    Jms.sendTexts(session, queue, "early");
    assertEquals("early", receiveText(session.createConsumer(queue)));
  }

  @Test
  void topic_reaches_every_subscriber_and_keeps_its_destination() throws Exception {
    Topic topic = session.createTopic(unique("msg.t"));
    MessageConsumer a = session.createConsumer(topic);
    Session other = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageConsumer b = other.createConsumer(topic);
    Jms.sendTexts(session, topic, "news");
    Message ma = receive(a);
    assertEquals("news", ((TextMessage) ma).getText());
    assertEquals("news", receiveText(b));
    assertInstanceOf(Topic.class, ma.getJMSDestination());
    assertEquals(topic.getTopicName(), ((Topic) ma.getJMSDestination()).getTopicName());
  }

  @Test
  void topic_without_subscribers_drops_the_message() throws Exception {
    Topic topic = session.createTopic(unique("msg.t"));
    Jms.sendTexts(session, topic, "nobody listens");
    MessageConsumer late = session.createConsumer(topic);
    assertNothing(late);
  }

  // ---- message types ----

  private static void setEveryPropertyType(Message m) throws Exception {
    m.setBooleanProperty("pBool", true);
    m.setByteProperty("pByte", (byte) -7);
    m.setShortProperty("pShort", (short) -300);
    m.setIntProperty("pInt", 123456789);
    m.setLongProperty("pLong", 1L << 40);
    m.setFloatProperty("pFloat", 1.5f);
    m.setDoubleProperty("pDouble", -2.25e100);
    m.setStringProperty("pString", "héllo wörld");
    m.setObjectProperty("pObject", 42L);
    m.setJMSCorrelationID("corr-" + m.hashCode());
    m.setJMSType("weir-type");
  }

  private static void assertEveryPropertyType(Message sent, Message got) throws Exception {
    assertTrue(got.getBooleanProperty("pBool"));
    assertEquals((byte) -7, got.getByteProperty("pByte"));
    assertEquals((short) -300, got.getShortProperty("pShort"));
    assertEquals(123456789, got.getIntProperty("pInt"));
    assertEquals(1L << 40, got.getLongProperty("pLong"));
    assertEquals(1.5f, got.getFloatProperty("pFloat"));
    assertEquals(-2.25e100, got.getDoubleProperty("pDouble"));
    assertEquals("héllo wörld", got.getStringProperty("pString"));
    assertEquals(42L, got.getObjectProperty("pObject"));
    // The property kept its type, not just a string form of it.
    assertInstanceOf(Byte.class, got.getObjectProperty("pByte"));
    assertInstanceOf(Short.class, got.getObjectProperty("pShort"));
    assertInstanceOf(Integer.class, got.getObjectProperty("pInt"));
    assertInstanceOf(Float.class, got.getObjectProperty("pFloat"));
    assertInstanceOf(Double.class, got.getObjectProperty("pDouble"));
    assertInstanceOf(Boolean.class, got.getObjectProperty("pBool"));
    assertEquals(sent.getJMSCorrelationID(), got.getJMSCorrelationID());
    assertEquals("weir-type", got.getJMSType());
    assertEquals(sent.getJMSMessageID(), got.getJMSMessageID());
    assertEquals(queueName(sent), queueName(got));
    List<String> names = new ArrayList<>();
    for (Enumeration<?> e = got.getPropertyNames(); e.hasMoreElements(); ) {
      names.add((String) e.nextElement());
    }
    assertTrue(
        names.containsAll(
            List.of(
                "pBool", "pByte", "pShort", "pInt", "pLong", "pFloat", "pDouble", "pString",
                "pObject")),
        "property names: " + names);
  }

  private static String queueName(Message m) throws Exception {
    return ((Queue) m.getJMSDestination()).getQueueName();
  }

  private Message roundTrip(Message m) throws Exception {
    setEveryPropertyType(m);
    MessageConsumer consumer = session.createConsumer(queue);
    try (MessageProducer p = session.createProducer(queue)) {
      p.send(m, DeliveryMode.PERSISTENT, 6, 0);
    }
    Message got = receive(consumer);
    assertEveryPropertyType(m, got);
    assertEquals(6, got.getJMSPriority());
    assertEquals(DeliveryMode.PERSISTENT, got.getJMSDeliveryMode());
    assertFalse(got.getJMSRedelivered());
    return got;
  }

  @Test
  void text_message_round_trip() throws Exception {
    String text = "text ✓ with\nnewline and \0 nul";
    TextMessage got = assertInstanceOf(TextMessage.class, roundTrip(session.createTextMessage(text)));
    assertEquals(text, got.getText());
  }

  @Test
  void bytes_message_round_trip() throws Exception {
    byte[] payload = new byte[70_000]; // over one 64 KiB frame: split transfers
    for (int i = 0; i < payload.length; i++) {
      payload[i] = (byte) (i * 31);
    }
    BytesMessage m = session.createBytesMessage();
    m.writeBytes(payload);
    BytesMessage got = assertInstanceOf(BytesMessage.class, roundTrip(m));
    assertEquals(payload.length, got.getBodyLength());
    byte[] back = new byte[payload.length];
    assertEquals(payload.length, got.readBytes(back));
    assertArrayEquals(payload, back);
  }

  @Test
  void map_message_round_trip() throws Exception {
    MapMessage m = session.createMapMessage();
    m.setBoolean("b", true);
    m.setByte("y", (byte) 1);
    m.setShort("s", (short) 2);
    m.setChar("c", 'λ');
    m.setInt("i", 3);
    m.setLong("l", 4L);
    m.setFloat("f", 5.5f);
    m.setDouble("d", 6.25);
    m.setString("str", "seven");
    m.setBytes("bytes", new byte[] {8, 9});
    MapMessage got = assertInstanceOf(MapMessage.class, roundTrip(m));
    assertTrue(got.getBoolean("b"));
    assertEquals((byte) 1, got.getByte("y"));
    assertEquals((short) 2, got.getShort("s"));
    assertEquals('λ', got.getChar("c"));
    assertEquals(3, got.getInt("i"));
    assertEquals(4L, got.getLong("l"));
    assertEquals(5.5f, got.getFloat("f"));
    assertEquals(6.25, got.getDouble("d"));
    assertEquals("seven", got.getString("str"));
    assertArrayEquals(new byte[] {8, 9}, got.getBytes("bytes"));
    assertEquals(10, Collections.list(got.getMapNames()).size());
  }

  @Test
  void stream_message_round_trip() throws Exception {
    StreamMessage m = session.createStreamMessage();
    m.writeBoolean(false);
    m.writeByte((byte) -1);
    m.writeShort((short) 1000);
    m.writeChar('x');
    m.writeInt(-5);
    m.writeLong(Long.MAX_VALUE);
    m.writeFloat(0.25f);
    m.writeDouble(Math.PI);
    m.writeString("stream");
    m.writeBytes(new byte[] {1, 2, 3});
    StreamMessage got = assertInstanceOf(StreamMessage.class, roundTrip(m));
    assertFalse(got.readBoolean());
    assertEquals((byte) -1, got.readByte());
    assertEquals((short) 1000, got.readShort());
    assertEquals('x', got.readChar());
    assertEquals(-5, got.readInt());
    assertEquals(Long.MAX_VALUE, got.readLong());
    assertEquals(0.25f, got.readFloat());
    assertEquals(Math.PI, got.readDouble());
    assertEquals("stream", got.readString());
    byte[] three = new byte[3];
    assertEquals(3, got.readBytes(three));
    assertArrayEquals(new byte[] {1, 2, 3}, three);
  }

  @Test
  void object_message_round_trip() throws Exception {
    ArrayList<Object> value = new ArrayList<>(List.of("a", 1, 2.5, List.of("nested")));
    ObjectMessage got = assertInstanceOf(ObjectMessage.class, roundTrip(session.createObjectMessage(value)));
    assertEquals(value, got.getObject());
  }

  @Test
  void plain_message_round_trip() throws Exception {
    Message got = roundTrip(session.createMessage());
    assertFalse(got instanceof TextMessage || got instanceof BytesMessage
        || got instanceof MapMessage || got instanceof StreamMessage
        || got instanceof ObjectMessage, "body type: " + got.getClass());
  }

  @Test
  void empty_text_and_null_text_stay_distinct() throws Exception {
    MessageConsumer consumer = session.createConsumer(queue);
    try (MessageProducer p = session.createProducer(queue)) {
      p.send(session.createTextMessage(""));
      p.send(session.createTextMessage(null));
    }
    assertEquals("", receiveText(consumer));
    assertNull(receiveText(consumer));
  }

  // ---- browsing and selectors ----

  @Test
  void queue_browser_sees_messages_without_consuming_them() throws Exception {
    Jms.sendTexts(session, queue, "b1", "b2", "b3");
    List<String> browsed = new ArrayList<>();
    try (QueueBrowser browser = session.createBrowser(queue)) {
      for (Enumeration<?> e = browser.getEnumeration(); e.hasMoreElements(); ) {
        browsed.add(((TextMessage) e.nextElement()).getText());
      }
    }
    assertEquals(List.of("b1", "b2", "b3"), browsed);
    MessageConsumer consumer = session.createConsumer(queue);
    assertEquals("b1", receiveText(consumer));
    assertEquals("b2", receiveText(consumer));
    assertEquals("b3", receiveText(consumer));
    assertNothing(consumer);
  }

  @Test
  void queue_browser_with_a_selector() throws Exception {
    try (MessageProducer p = session.createProducer(queue)) {
      for (int i = 0; i < 6; i++) {
        TextMessage m = session.createTextMessage("m" + i);
        m.setIntProperty("n", i);
        p.send(m);
      }
    }
    List<String> browsed = new ArrayList<>();
    try (QueueBrowser browser = session.createBrowser(queue, "n >= 4")) {
      for (Enumeration<?> e = browser.getEnumeration(); e.hasMoreElements(); ) {
        browsed.add(((TextMessage) e.nextElement()).getText());
      }
    }
    assertEquals(List.of("m4", "m5"), browsed);
  }

  @Test
  void selectors_pick_matching_messages_and_leave_the_rest() throws Exception {
    String[][] data = {
      {"red", "1"}, {"blue", "2"}, {"red", "3"}, {"green", "4"}, {"red", "5"}, {"blue", "6"}
    };
    try (MessageProducer p = session.createProducer(queue)) {
      for (String[] d : data) {
        TextMessage m = session.createTextMessage(d[0] + d[1]);
        m.setStringProperty("color", d[0]);
        m.setIntProperty("n", Integer.parseInt(d[1]));
        p.setPriority(d[0].equals("green") ? 9 : 4);
        p.send(m);
      }
    }
    MessageConsumer reds = session.createConsumer(queue, "color = 'red' AND n > 1");
    assertEquals("red3", receiveText(reds));
    assertEquals("red5", receiveText(reds));
    assertNothing(reds);
    reds.close();

    MessageConsumer likes = session.createConsumer(queue, "color LIKE 'bl%' OR JMSPriority = 9");
    List<String> got = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      got.add(receiveText(likes));
    }
    Collections.sort(got);
    assertEquals(List.of("blue2", "blue6", "green4"), got);
    assertNothing(likes);
    likes.close();

    MessageConsumer rest = session.createConsumer(queue);
    assertEquals("red1", receiveText(rest));
    assertNothing(rest);
  }

  @Test
  void selector_on_a_topic_subscription() throws Exception {
    Topic topic = session.createTopic(unique("sel.t"));
    MessageConsumer big = session.createConsumer(topic, "size IN ('L', 'XL')");
    try (MessageProducer p = session.createProducer(topic)) {
      for (String size : List.of("S", "L", "M", "XL")) {
        TextMessage m = session.createTextMessage(size);
        m.setStringProperty("size", size);
        p.send(m);
      }
    }
    assertEquals("L", receiveText(big));
    assertEquals("XL", receiveText(big));
    assertNothing(big);
  }

  // ---- acknowledgement and transactions ----

  @Test
  void transacted_send_is_invisible_until_commit_and_gone_after_rollback() throws Exception {
    Session tx = connection.createSession(true, Session.SESSION_TRANSACTED);
    MessageProducer p = tx.createProducer(queue);
    MessageConsumer consumer = session.createConsumer(queue);
    p.send(tx.createTextMessage("rolled back"));
    tx.rollback();
    p.send(tx.createTextMessage("committed 1"));
    p.send(tx.createTextMessage("committed 2"));
    assertNothing(consumer);
    tx.commit();
    assertEquals("committed 1", receiveText(consumer));
    assertEquals("committed 2", receiveText(consumer));
    assertNothing(consumer);
  }

  @Test
  void transacted_receive_rolled_back_is_redelivered_then_committed_once() throws Exception {
    Jms.sendTexts(session, queue, "t1", "t2");
    Session tx = connection.createSession(true, Session.SESSION_TRANSACTED);
    MessageConsumer consumer = tx.createConsumer(queue);
    Message first = receive(consumer);
    assertEquals("t1", ((TextMessage) first).getText());
    assertFalse(first.getJMSRedelivered());
    assertEquals("t2", receiveText(consumer));
    tx.rollback();

    Message again = receive(consumer);
    assertEquals("t1", ((TextMessage) again).getText());
    assertTrue(again.getJMSRedelivered(), "rolled-back message must be marked redelivered");
    assertTrue(again.getIntProperty("JMSXDeliveryCount") >= 2);
    Message again2 = receive(consumer);
    assertEquals("t2", ((TextMessage) again2).getText());
    assertTrue(again2.getJMSRedelivered());
    tx.commit();
    consumer.close();

    // Committed means gone, also for a fresh consumer on another connection.
    Session fresh = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    assertNothing(fresh.createConsumer(queue));
  }

  @Test
  void client_acknowledge_keeps_unacknowledged_messages() throws Exception {
    Jms.sendTexts(session, queue, "c1", "c2", "c3");
    Connection c = broker.connect();
    Session ack = c.createSession(false, Session.CLIENT_ACKNOWLEDGE);
    MessageConsumer consumer = ack.createConsumer(queue);
    Message m1 = receive(consumer);
    receive(consumer);
    m1.acknowledge(); // JMS: acknowledges everything consumed so far on the session (c1, c2)
    Message m3 = receive(consumer);
    assertEquals("c3", ((TextMessage) m3).getText());
    c.close(); // c3 never acknowledged

    Session again = broker.connect().createSession(false, Session.CLIENT_ACKNOWLEDGE);
    MessageConsumer second = again.createConsumer(queue);
    Message back = receive(second);
    assertEquals("c3", ((TextMessage) back).getText());
    assertTrue(back.getJMSRedelivered());
    back.acknowledge();
    assertNothing(second);
  }

  @Test
  void session_recover_redelivers_unacknowledged_messages() throws Exception {
    Jms.sendTexts(session, queue, "r1", "r2");
    Session ack = connection.createSession(false, Session.CLIENT_ACKNOWLEDGE);
    MessageConsumer consumer = ack.createConsumer(queue);
    assertEquals("r1", receiveText(consumer));
    ack.recover();
    Message m = receive(consumer);
    assertEquals("r1", ((TextMessage) m).getText());
    assertTrue(m.getJMSRedelivered());
    Message m2 = receive(consumer);
    assertEquals("r2", ((TextMessage) m2).getText());
    m2.acknowledge();
    assertNothing(consumer);
  }
}
