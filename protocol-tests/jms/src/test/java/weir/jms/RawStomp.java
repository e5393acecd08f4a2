package weir.jms;

import java.io.BufferedInputStream;
import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * STOMP 1.2 over a plain socket: the other side of the cross-protocol tests, written here so that
 * no STOMP library's conversions stand between the wire and the assertions.
 */
final class RawStomp implements AutoCloseable {

  /** A frame as read from the wire, header values unescaped. */
  record Frame(String command, Map<String, String> headers, byte[] body) {
    String header(String name) {
      return headers.get(name);
    }

    String text() {
      return new String(body, StandardCharsets.UTF_8);
    }
  }

  private final Socket socket;
  private final InputStream in;
  private final OutputStream out;

  RawStomp(int port) throws IOException {
    socket = new Socket();
    socket.connect(new InetSocketAddress("127.0.0.1", port), 5000);
    socket.setTcpNoDelay(true);
    in = new BufferedInputStream(socket.getInputStream());
    out = socket.getOutputStream();
  }

  /** CONNECT and wait for CONNECTED; fails on ERROR. */
  void connect(String login, String passcode) throws IOException {
    Map<String, String> h = new LinkedHashMap<>();
    h.put("accept-version", "1.2");
    h.put("host", "127.0.0.1");
    h.put("login", login);
    h.put("passcode", passcode);
    h.put("heart-beat", "0,0");
    send("CONNECT", h, new byte[0]);
    Frame f = receive(5000);
    if (f == null || !f.command().equals("CONNECTED")) {
      throw new IOException("STOMP CONNECT refused: " + describe(f));
    }
  }

  /** SEND with a receipt, waiting for it so the message is in the broker when this returns. */
  void sendMessage(String destination, Map<String, String> headers, byte[] body) throws IOException {
    Map<String, String> h = new LinkedHashMap<>();
    h.put("destination", destination);
    h.putAll(headers);
    String receipt = "r-" + System.nanoTime();
    h.put("receipt", receipt);
    send("SEND", h, body);
    awaitReceipt(receipt);
  }

  void subscribe(String destination, String id) throws IOException {
    Map<String, String> h = new LinkedHashMap<>();
    h.put("destination", destination);
    h.put("id", id);
    h.put("ack", "auto");
    String receipt = "s-" + System.nanoTime();
    h.put("receipt", receipt);
    send("SUBSCRIBE", h, new byte[0]);
    awaitReceipt(receipt);
  }

  private void awaitReceipt(String receipt) throws IOException {
    Frame f = receive(5000);
    if (f == null || !f.command().equals("RECEIPT") || !receipt.equals(f.header("receipt-id"))) {
      throw new IOException("expected RECEIPT " + receipt + ", got " + describe(f));
    }
  }

  void send(String command, Map<String, String> headers, byte[] body) throws IOException {
    ByteArrayOutputStream frame = new ByteArrayOutputStream();
    StringBuilder head = new StringBuilder(command).append('\n');
    for (Map.Entry<String, String> e : headers.entrySet()) {
      head.append(escape(e.getKey())).append(':').append(escape(e.getValue())).append('\n');
    }
    if (body.length > 0) {
      head.append("content-length:").append(body.length).append('\n');
    }
    head.append('\n');
    frame.write(head.toString().getBytes(StandardCharsets.UTF_8));
    frame.write(body);
    frame.write(0);
    out.write(frame.toByteArray());
    out.flush();
  }

  /** The next frame, or null when none arrives within {@code timeoutMs}. */
  Frame receive(int timeoutMs) throws IOException {
    socket.setSoTimeout(timeoutMs);
    int b;
    try {
      // Heart-beat EOLs between frames.
      do {
        b = in.read();
      } while (b == '\n' || b == '\r');
    } catch (SocketTimeoutException e) {
      return null;
    }
    if (b < 0) {
      throw new EOFException("broker closed the STOMP connection");
    }
    String command = (char) b + readLine();
    Map<String, String> headers = new LinkedHashMap<>();
    for (String line = readLine(); !line.isEmpty(); line = readLine()) {
      int colon = line.indexOf(':');
      if (colon < 0) {
        throw new IOException("bad header line: " + line);
      }
      // The first occurrence of a repeated header wins (STOMP 1.2).
      headers.putIfAbsent(unescape(line.substring(0, colon)), unescape(line.substring(colon + 1)));
    }
    byte[] body;
    String length = headers.get("content-length");
    if (length != null) {
      body = in.readNBytes(Integer.parseInt(length));
      if (in.read() != 0) {
        throw new IOException("frame body not followed by NUL");
      }
    } else {
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      while ((b = in.read()) != 0) {
        if (b < 0) {
          throw new EOFException("EOF inside a frame body");
        }
        buf.write(b);
      }
      body = buf.toByteArray();
    }
    return new Frame(command, headers, body);
  }

  private String readLine() throws IOException {
    ByteArrayOutputStream line = new ByteArrayOutputStream();
    int b;
    while ((b = in.read()) != '\n') {
      if (b < 0) {
        throw new EOFException("EOF inside a frame header");
      }
      line.write(b);
    }
    String s = line.toString(StandardCharsets.UTF_8);
    return s.endsWith("\r") ? s.substring(0, s.length() - 1) : s;
  }

  static String escape(String s) {
    return s.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n").replace(":", "\\c");
  }

  static String unescape(String s) {
    StringBuilder out = new StringBuilder(s.length());
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (c == '\\' && i + 1 < s.length()) {
        char n = s.charAt(++i);
        out.append(
            switch (n) {
              case 'n' -> '\n';
              case 'r' -> '\r';
              case 'c' -> ':';
              default -> n;
            });
      } else {
        out.append(c);
      }
    }
    return out.toString();
  }

  private static String describe(Frame f) {
    if (f == null) {
      return "nothing (timeout)";
    }
    return f.command() + " " + f.headers() + " " + f.text();
  }

  @Override
  public void close() throws IOException {
    try {
      send("DISCONNECT", Map.of(), new byte[0]);
    } catch (IOException ignored) {
      // Already gone.
    }
    socket.close();
  }
}
