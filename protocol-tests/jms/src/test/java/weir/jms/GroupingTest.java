package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static weir.jms.Jms.receive;
import static weir.jms.Jms.unique;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TextMessage;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Artemis-style message grouping as Qpid JMS users see it: JMSXGroupID (AMQP properties.group-id),
 * JMSXGroupSeq (properties.group-sequence, -1 sent as 4294967295), autogroup through a connection
 * factory chosen by virtual host, group_first_key and rebalancing with paused dispatch.
 */
class GroupingTest {
  static final String FIRST_KEY = "JMSXGroupFirstForConsumer";
  static final String REBALANCE_QUEUE = "rebalance.q";

  @RegisterExtension
  static final WeirBroker broker =
      new WeirBroker(
          """
          [queue_defaults]
          group_first_key = "%s"

          [[queues]]
          name = "%s"
          group_rebalance = true
          group_rebalance_pause_dispatch = true

          [connection_factories.orders]
          autogroup = true
          """
              .formatted(FIRST_KEY, REBALANCE_QUEUE));

  // ---- helpers ----

  /** A consumer on its own connection, so closing that connection is "the consumer left". */
  private static Jms.Collector consumerOn(Queue queue, String name, int ackMode, String... options)
      throws JMSException {
    Connection c = broker.connect(options);
    Session s = c.createSession(false, ackMode);
    Jms.Collector collector = new Jms.Collector(name, s.createConsumer(queue));
    collector.connection = c;
    return collector;
  }

  /** Sends {@code seqFrom..seqTo-1} for each of {@code groups} groups, interleaved. */
  private static void sendGroups(Session s, Queue queue, int groups, int seqFrom, int seqTo)
      throws JMSException {
    try (MessageProducer p = s.createProducer(queue)) {
      for (int seq = seqFrom; seq < seqTo; seq++) {
        for (int g = 0; g < groups; g++) {
          TextMessage m = s.createTextMessage("g" + g + "#" + seq);
          m.setStringProperty("JMSXGroupID", "g" + g);
          m.setIntProperty("seq", seq);
          p.send(m);
        }
      }
    }
  }

  /** group id -> the "seq" values this consumer got for it, in arrival order. */
  private static Map<String, List<Integer>> byGroup(List<Message> messages) throws JMSException {
    Map<String, List<Integer>> out = new TreeMap<>();
    for (Message m : messages) {
      out.computeIfAbsent(m.getStringProperty("JMSXGroupID"), k -> new ArrayList<>())
          .add(m.getIntProperty("seq"));
    }
    return out;
  }

  private static List<Integer> range(int from, int to) {
    return IntStream.range(from, to).boxed().toList();
  }

  private static boolean isFirst(Message m) throws JMSException {
    Object v = m.getObjectProperty(FIRST_KEY);
    return v != null && Boolean.parseBoolean(v.toString());
  }

  private static Queue queue(Session s, String prefix) throws JMSException {
    return s.createQueue(unique(prefix));
  }

  // ---- tests ----

  @Test
  void ten_groups_of_fifty_each_land_on_one_consumer_in_order() throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = queue(s, "grp.q");
    Jms.Collector a = consumerOn(q, "a", Session.AUTO_ACKNOWLEDGE);
    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);
    sendGroups(s, q, 10, 0, 50);
    assertEquals(500, Jms.awaitTotal(500, 30_000, a, b));
    Thread.sleep(200); // nothing extra may follow
    assertEquals(500, a.received.size() + b.received.size());

    Map<String, List<Integer>> ga = byGroup(a.snapshot());
    Map<String, List<Integer>> gb = byGroup(b.snapshot());
    for (int g = 0; g < 10; g++) {
      String id = "g" + g;
      assertFalse(
          ga.containsKey(id) && gb.containsKey(id),
          id + " reached both consumers: a=" + ga.get(id) + " b=" + gb.get(id));
      List<Integer> got = ga.containsKey(id) ? ga.get(id) : gb.get(id);
      assertEquals(range(0, 50), got, id + " out of order or incomplete");
    }
    assertFalse(ga.isEmpty() || gb.isEmpty(), "groups not balanced: a=" + ga.keySet() + " b=" + gb.keySet());
  }

  @Test
  void groups_move_with_order_intact_when_their_consumer_leaves() throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = queue(s, "move.q");
    Jms.Collector a = consumerOn(q, "a", Session.CLIENT_ACKNOWLEDGE);
    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);

    sendGroups(s, q, 10, 0, 10);
    assertEquals(100, Jms.awaitTotal(100, 10_000, a, b));
    Set<String> groupsOfA = byGroup(a.snapshot()).keySet();
    assertFalse(groupsOfA.isEmpty(), "a got no group; cannot test moving");
    a.received.get(a.received.size() - 1).acknowledge(); // a settles 0..9 of its groups

    sendGroups(s, q, 10, 10, 20); // a keeps 10..19 of its groups unacknowledged
    assertEquals(200, Jms.awaitTotal(200, 10_000, a, b));
    a.connection.close(); // unsettled 10..19 go back; the groups move to b

    sendGroups(s, q, 10, 20, 50);
    int expectedAtB = 500 - 10 * groupsOfA.size();
    long deadline = System.currentTimeMillis() + 20_000;
    while (b.received.size() < expectedAtB && System.currentTimeMillis() < deadline) {
      Thread.sleep(20);
    }
    Thread.sleep(200);
    Map<String, List<Integer>> gb = byGroup(b.snapshot());
    for (int g = 0; g < 10; g++) {
      String id = "g" + g;
      List<Integer> expected = groupsOfA.contains(id) ? range(10, 50) : range(0, 50);
      assertEquals(expected, gb.get(id), id + (groupsOfA.contains(id) ? " (moved from a)" : ""));
    }
    for (Message m : b.snapshot()) {
      int seq = m.getIntProperty("seq");
      boolean moved = groupsOfA.contains(m.getStringProperty("JMSXGroupID"));
      assertEquals(moved && seq < 20, m.getJMSRedelivered(), "JMSRedelivered of " + Jms.describe(m) + " seq " + seq);
    }
  }

  @Test
  void group_sequence_minus_one_releases_the_group() throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = queue(s, "release.q");
    // Prefetch 0: a has credit only while inside receive(), so a message may go to b
    // unless its group is bound to a.
    Session sa = broker.connect("jms.prefetchPolicy.all=0").createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageConsumer a = sa.createConsumer(q);

    try (MessageProducer p = s.createProducer(q)) {
      p.send(grouped(s, "release", 1, "release-1"));
      p.send(grouped(s, "keep", 1, "keep-1"));
      p.send(grouped(s, "release", -1, "release-last")); // closes the group
    }
    assertEquals("release-1", ((TextMessage) receive(a)).getText());
    assertEquals("keep-1", ((TextMessage) receive(a)).getText());
    Message last = receive(a);
    assertEquals("release-last", ((TextMessage) last).getText());
    assertEquals(-1, last.getIntProperty("JMSXGroupSeq"), "group sequence read as signed");

    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);
    try (MessageProducer p = s.createProducer(q)) {
      p.send(grouped(s, "keep", 2, "keep-2"));
      p.send(grouped(s, "release", 1, "release-again"));
    }
    Message moved = b.next(Jms.RECEIVE_MS);
    assertNotNull(moved, "the released group did not bind to the free consumer");
    assertEquals("release-again", ((TextMessage) moved).getText());
    assertNull(b.next(Jms.QUIET_MS), "group 'keep' is still bound to a");
    assertEquals("keep-2", ((TextMessage) receive(a)).getText());
  }

  private static TextMessage grouped(Session s, String group, int seq, String text)
      throws JMSException {
    TextMessage m = s.createTextMessage(text);
    m.setStringProperty("JMSXGroupID", group);
    m.setIntProperty("JMSXGroupSeq", seq);
    return m;
  }

  @Test
  void autogroup_through_a_connection_factory_chosen_by_virtual_host() throws Exception {
    Session plain = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = queue(plain, "auto.q");
    Jms.Collector a = consumerOn(q, "a", Session.AUTO_ACKNOWLEDGE);
    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);

    Session orders = broker.connect("amqp.vhost=orders").createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageProducer p1 = orders.createProducer(q);
    MessageProducer p2 = orders.createProducer(q);
    for (int i = 0; i < 20; i++) {
      for (MessageProducer p : List.of(p1, p2)) {
        TextMessage m = orders.createTextMessage(p == p1 ? "p1" : "p2");
        m.setIntProperty("seq", i);
        p.send(m);
      }
    }
    assertEquals(40, Jms.awaitTotal(40, 10_000, a, b));

    Map<String, Set<String>> groupsByProducer = new TreeMap<>();
    for (Jms.Collector c : List.of(a, b)) {
      Map<String, List<Integer>> seqsByProducer = new TreeMap<>();
      for (Message m : c.snapshot()) {
        String producer = ((TextMessage) m).getText();
        String group = m.getStringProperty("JMSXGroupID");
        assertNotNull(group, "autogroup gave " + producer + " no group id");
        groupsByProducer.computeIfAbsent(producer, k -> new HashSet<>()).add(group);
        seqsByProducer.computeIfAbsent(producer, k -> new ArrayList<>()).add(m.getIntProperty("seq"));
      }
      for (var e : seqsByProducer.entrySet()) {
        assertEquals(range(0, 20), e.getValue(), e.getKey() + "'s messages split or out of order at " + c);
      }
    }
    assertEquals(1, groupsByProducer.get("p1").size(), "p1 groups: " + groupsByProducer);
    assertEquals(1, groupsByProducer.get("p2").size(), "p2 groups: " + groupsByProducer);
    assertNotEquals(groupsByProducer.get("p1"), groupsByProducer.get("p2"), "each producer its own group");

    // An explicit group id wins over autogroup; a connection without the vhost gets none.
    TextMessage explicit = orders.createTextMessage("explicit");
    explicit.setStringProperty("JMSXGroupID", "mine");
    p1.send(explicit);
    Jms.sendTexts(plain, q, "ungrouped");
    assertEquals(42, Jms.awaitTotal(42, Jms.RECEIVE_MS, a, b));
    Set<String> last = new HashSet<>();
    for (Jms.Collector c : List.of(a, b)) {
      for (Message m : c.snapshot()) {
        String text = ((TextMessage) m).getText();
        if (text.equals("explicit") || text.equals("ungrouped")) {
          last.add(text + "=" + m.getStringProperty("JMSXGroupID"));
        }
      }
    }
    assertEquals(Set.of("explicit=mine", "ungrouped=null"), last);
  }

  @Test
  void group_first_key_marks_the_first_message_of_a_group_for_each_consumer() throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = queue(s, "first.q");
    Jms.Collector a = consumerOn(q, "a", Session.AUTO_ACKNOWLEDGE);
    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);
    sendGroups(s, q, 4, 0, 5);
    assertEquals(20, Jms.awaitTotal(20, 10_000, a, b));
    Set<String> groupsOfA = byGroup(a.snapshot()).keySet();
    for (Jms.Collector c : List.of(a, b)) {
      assertFirstOnlyOnFirst(c.snapshot(), c + " before the move");
    }

    // a leaves; its groups' next messages are the first of those groups for b.
    int before = b.received.size();
    a.connection.close();
    sendGroups(s, q, 4, 5, 10);
    long deadline = System.currentTimeMillis() + 10_000;
    while (b.received.size() < before + 20 && System.currentTimeMillis() < deadline) {
      Thread.sleep(20);
    }
    List<Message> after = b.snapshot().subList(before, b.received.size());
    assertEquals(20, after.size());
    Map<String, Integer> firstFlags = new TreeMap<>();
    Map<String, Integer> firstSeq = new TreeMap<>();
    for (Message m : after) {
      String g = m.getStringProperty("JMSXGroupID");
      firstSeq.putIfAbsent(g, m.getIntProperty("seq"));
      if (isFirst(m)) {
        firstFlags.merge(g, 1, Integer::sum);
        assertEquals(5, m.getIntProperty("seq"), "flag on a later message of " + g);
      }
    }
    for (int g = 0; g < 4; g++) {
      String id = "g" + g;
      Integer expected = groupsOfA.contains(id) ? 1 : null;
      assertEquals(expected, firstFlags.get(id), id + (groupsOfA.contains(id) ? " moved to b" : " stayed on b"));
    }
  }

  private static void assertFirstOnlyOnFirst(List<Message> messages, String who) throws JMSException {
    Set<String> seen = new HashSet<>();
    for (Message m : messages) {
      String g = m.getStringProperty("JMSXGroupID");
      boolean firstForConsumer = seen.add(g);
      assertEquals(firstForConsumer, isFirst(m), who + ": " + FIRST_KEY + " on " + Jms.describe(m) + " seq " + m.getIntProperty("seq"));
    }
  }

  @Test
  void rebalance_with_paused_dispatch_never_splits_a_group_between_consumers() throws Exception {
    Session s = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    Queue q = s.createQueue(REBALANCE_QUEUE);
    Jms.Collector a = consumerOn(q, "a", Session.CLIENT_ACKNOWLEDGE);
    sendGroups(s, q, 10, 0, 3);
    assertEquals(30, Jms.awaitTotal(30, 10_000, a));
    // a holds every group, each with unsettled messages. b joins: groups move to b, but
    // b may get nothing of a moved group until a has settled what it holds of it.
    Jms.Collector b = consumerOn(q, "b", Session.AUTO_ACKNOWLEDGE);
    sendGroups(s, q, 10, 3, 6);
    Thread.sleep(Jms.QUIET_MS);
    assertEquals(List.of(), b.snapshot().stream().map(Jms::describe).toList(),
        "b got messages of groups a still holds unsettled");

    a.received.get(a.received.size() - 1).acknowledge();
    assertEquals(60, Jms.awaitTotal(60, 10_000, a, b));
    Thread.sleep(200);
    assertEquals(60, a.received.size() + b.received.size());

    Map<String, List<Integer>> laterA = byGroup(a.snapshot().subList(30, a.received.size()));
    Map<String, List<Integer>> laterB = byGroup(b.snapshot());
    assertFalse(laterB.isEmpty(), "no group moved to b on rebalance");
    for (int g = 0; g < 10; g++) {
      String id = "g" + g;
      assertFalse(laterA.containsKey(id) && laterB.containsKey(id),
          id + " went to both: a=" + laterA.get(id) + " b=" + laterB.get(id));
      List<Integer> got = laterA.containsKey(id) ? laterA.get(id) : laterB.get(id);
      assertEquals(range(3, 6), got, id);
    }
  }
}
