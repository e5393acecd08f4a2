package weir.jms;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static weir.jms.Jms.receive;
import static weir.jms.Jms.unique;

import jakarta.jms.Connection;
import jakarta.jms.JMSException;
import jakarta.jms.Message;
import jakarta.jms.MessageConsumer;
import jakarta.jms.MessageProducer;
import jakarta.jms.Queue;
import jakarta.jms.Session;
import jakarta.jms.TemporaryQueue;
import jakarta.jms.TextMessage;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/** Request/reply through a temporary queue (dynamic node) and the anonymous relay. */
class RequestReplyTest {
  @RegisterExtension static final WeirBroker broker = new WeirBroker();

  @Test
  void request_reply_through_a_temporary_queue() throws Exception {
    String serviceName = unique("service.q");

    // The service: answers every request on JMSReplyTo with an anonymous producer.
    Session service = broker.connect().createSession(false, Session.AUTO_ACKNOWLEDGE);
    MessageProducer anonymous = service.createProducer(null);
    service
        .createConsumer(service.createQueue(serviceName))
        .setMessageListener(
            request -> {
              try {
                TextMessage reply =
                    service.createTextMessage(((TextMessage) request).getText().toUpperCase());
                reply.setJMSCorrelationID(request.getJMSCorrelationID());
                anonymous.send(request.getJMSReplyTo(), reply);
              } catch (JMSException e) {
                throw new IllegalStateException(e);
              }
            });

    Connection client = broker.connect();
    Session session = client.createSession(false, Session.AUTO_ACKNOWLEDGE);
    TemporaryQueue replies = session.createTemporaryQueue();
    MessageConsumer replyConsumer = session.createConsumer(replies);
    try (MessageProducer p = session.createProducer(session.createQueue(serviceName))) {
      for (int i = 0; i < 3; i++) {
        TextMessage request = session.createTextMessage("ping " + i);
        request.setJMSReplyTo(replies);
        request.setJMSCorrelationID("req-" + i);
        p.send(request);
      }
    }
    for (int i = 0; i < 3; i++) {
      Message reply = receive(replyConsumer);
      assertEquals("PING " + i, ((TextMessage) reply).getText());
      assertEquals("req-" + i, reply.getJMSCorrelationID());
      assertInstanceOf(Queue.class, reply.getJMSDestination());
    }

    // Deleting it is the broker's business too (the dynamic link's node goes away).
    replyConsumer.close();
    replies.delete();
  }
}
