package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static weir.jms.Jms.assertNothing;
import static weir.jms.Jms.receiveText;
import static weir.jms.Jms.unique;

import jakarta.jms.Connection;
import jakarta.jms.DeliveryMode;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import jakarta.jms.Topic;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Durable (across kill -9), unsubscribed and shared topic subscriptions. */
class SubscriptionTest {
  @RegisterExtension static final WeirBroker broker = new WeirBroker();

  private static void publish(Topic topic, String... texts) throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    try (MessageProducer p = s.createProducer(topic)) {
      p.setDeliveryMode(DeliveryMode.PERSISTENT);
      for (String t : texts) {
        p.send(s.createTextMessage(t));
      }
    }
    s.close();
  }

  @Test
  void durable_subscription_keeps_messages_sent_while_offline_across_a_crash() throws Exception {
    String clientId = unique("durable-client");
    String subName = unique("sub");
    String topicName = unique("dur.t");

    Connection c = broker.connectWithClientId(clientId);
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Topic topic = s.createTopic(topicName);
    MessageConsumer sub = s.createDurableConsumer(topic, subName);
    publish(topic, "online");
    assertEquals("online", receiveText(sub));
    c.close(); // subscriber offline; the subscription stays

    publish(topic, "offline 1", "offline 2", "offline 3");
    broker.restartAfterCrash();

    Connection again = broker.connectWithClientId(clientId);
    Session s2 = again.createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageConsumer back = s2.createDurableConsumer(s2.createTopic(topicName), subName);
    assertEquals("offline 1", receiveText(back));
    assertEquals("offline 2", receiveText(back));
    assertEquals("offline 3", receiveText(back));
    assertNothing(back);
  }

  @Test
  void unsubscribe_removes_the_subscription_and_its_messages() throws Exception {
    String clientId = unique("unsub-client");
    String subName = unique("sub");
    Connection c = broker.connectWithClientId(clientId);
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Topic topic = s.createTopic(unique("unsub.t"));
    s.createDurableConsumer(topic, subName).close();
    publish(topic, "kept for the subscription");
    s.unsubscribe(subName);
    publish(topic, "nobody subscribed");

    MessageConsumer fresh = s.createDurableConsumer(topic, subName);
    assertNothing(fresh);
    publish(topic, "after resubscribe");
    assertEquals("after resubscribe", receiveText(fresh));
  }

  @Test
  void durable_subscription_with_a_selector() throws Exception {
    String clientId = unique("dsel-client");
    Connection c = broker.connectWithClientId(clientId);
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Topic topic = s.createTopic(unique("dsel.t"));
    String subName = unique("sub");
    s.createDurableConsumer(topic, subName, "urgent = TRUE", false).close();
    Session ps = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    try (MessageProducer p = ps.createProducer(topic)) {
      for (int i = 0; i < 4; i++) {
        TextMessage m = ps.createTextMessage("m" + i);
        m.setBooleanProperty("urgent", i % 2 == 1);
        p.send(m);
      }
    }
    MessageConsumer sub = s.createDurableConsumer(topic, subName, "urgent = TRUE", false);
    assertEquals("m1", receiveText(sub));
    assertEquals("m3", receiveText(sub));
    assertNothing(sub);
  }

  @Test
  void shared_subscription_splits_messages_between_its_consumers() throws Exception {
    String topicName = unique("shared.t");
    String subName = unique("shared-sub");
    Session s1 = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Session s2 = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Topic topic = s1.createTopic(topicName);
    Jms.Collector a = new Jms.Collector("a", s1.createSharedConsumer(topic, subName));
    Jms.Collector b = new Jms.Collector("b", s2.createSharedConsumer(topic, subName));
    // A plain subscriber on the same topic still gets its own copy of everything.
    Session s3 = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Jms.Collector plain = new Jms.Collector("plain", s3.createConsumer(topic));

    List<String> sent = new ArrayList<>();
    for (int i = 0; i < 40; i++) {
      sent.add("s" + i);
    }
    publish(topic, sent.toArray(String[]::new));

    assertEquals(40, Jms.awaitTotal(40, Jms.RECEIVE_MS, a, b));
    assertEquals(40, Jms.awaitTotal(40, Jms.RECEIVE_MS, plain));
    Thread.sleep(300); // nothing extra may follow
    Set<String> seen = new HashSet<>();
    for (Message m : a.snapshot()) {
      assertTrue(seen.add(((TextMessage) m).getText()), "duplicate " + Jms.describe(m));
    }
    for (Message m : b.snapshot()) {
      assertTrue(seen.add(((TextMessage) m).getText()), "duplicate " + Jms.describe(m));
    }
    assertEquals(new HashSet<>(sent), seen);
    assertTrue(
        !a.received.isEmpty() && !b.received.isEmpty(),
        "both shared consumers should get some: a=" + a.received.size() + " b=" + b.received.size());
  }

  @Test
  void shared_durable_subscription_survives_its_consumers() throws Exception {
    String clientId = unique("sdur-client");
    String subName = unique("sdur");
    String topicName = unique("sdur.t");
    Connection c = broker.connectWithClientId(clientId);
    Session s = c.createSession(false, Session.AUTO_ACKNOWLEDGE);
    Topic topic = s.createTopic(topicName);
    s.createSharedDurableConsumer(topic, subName).close();
    publish(topic, "while nobody listens");
    MessageConsumer back = s.createSharedDurableConsumer(topic, subName);
    assertEquals("while nobody listens", receiveText(back));
    back.close();
    s.unsubscribe(subName);
  }
}
