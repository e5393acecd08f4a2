# Start functions for benches/compare. Each `start_NAME DIR` installs what it
# needs, starts one broker on loopback with its data under DIR, waits until its
# STOMP port answers, and sets URL[NAME], PID[NAME] (the listening process)
# and, where needed, LOGIN[NAME]; a broker with an AMQP 1.0 port also sets
# AMQP_URL[NAME] (and AMQP_QUEUE_PREFIX[NAME] when a queue address needs one).
# Every process it starts goes into STARTED.
# Callers: benches/compare (which defines URL, PID, LOGIN, STARTED, WEIR, CACHE).

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT SECONDS: true once something listens on 127.0.0.1:PORT.
wait_port() {
  local port=$1 deadline=$((SECONDS + $2))
  while [ $SECONDS -lt $deadline ]; do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.5
  done
  return 1
}

# The pid listening on 127.0.0.1:PORT (a wrapper script's pid is not it).
listener_pid() {
  ss -Hltnp "sport = :$1" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1
}

# server_pid PID: PID itself (kept for symmetry; PID[] already holds listeners).
server_pid() { echo "$1"; }

# register NAME PORT LAUNCHED_PID: records the broker once its port answers.
register() {
  local name=$1 port=$2 launched=$3 timeout=${4:-120}
  STARTED+=("$launched")
  if ! wait_port "$port" "$timeout"; then
    return 1
  fi
  local pid
  pid=$(listener_pid "$port")
  [ -n "$pid" ] && [ "$pid" != "$launched" ] && STARTED+=("$pid")
  PID[$name]=${pid:-$launched}
  URL[$name]="stomp://127.0.0.1:$port"
}

apt_install() {
  dpkg -s "$1" >/dev/null 2>&1 && return 0
  [ -n "${APT_UPDATED:-}" ] || { apt-get update -qq >/dev/null 2>&1 || true; APT_UPDATED=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null 2>&1
}

start_weir() {
  local dir=$1 port amqp
  mkdir -p "$dir"
  port=$(free_port); amqp=$(free_port)
  # shellcheck disable=SC2046 # TLS listeners (benches/lib/tls.sh), when asked for.
  "$WEIR" serve $(tls_weir_config "$dir") --data-dir "$dir/data" --stomp "127.0.0.1:$port" --amqp "127.0.0.1:$amqp" --http off --log warn \
    >"$dir/broker.log" 2>&1 &
  register weir "$port" $! 30 || return 1
  AMQP_URL[weir]="amqp://127.0.0.1:$amqp"
  tls_weir
}

# A second Weir, from WEIR_BASE_BIN: a change measured against its base in one
# run (`benches/compare --brokers "weir weir-base"`; the ratios are after/before).
start_weir-base() {
  local dir=$1 port amqp
  [ -x "${WEIR_BASE_BIN:-}" ] || { echo "WEIR_BASE_BIN is not set to a weir binary" >"$dir.log"; return 1; }
  mkdir -p "$dir"
  port=$(free_port); amqp=$(free_port)
  "$WEIR_BASE_BIN" serve --data-dir "$dir/data" --stomp "127.0.0.1:$port" --amqp "127.0.0.1:$amqp" --log warn \
    >"$dir/broker.log" 2>&1 &
  register weir-base "$port" $! 30 || return 1
  AMQP_URL[weir-base]="amqp://127.0.0.1:$amqp"
}

# Both relay ceilings in one process: STOMP, and AMQP 1.0 for the -amqp rows.
start_sink() {
  local dir=$1 port amqp
  mkdir -p "$dir"
  port=$(free_port); amqp=$(free_port)
  "$WEIR" perf --sink-stomp "127.0.0.1:$port" --sink-amqp "127.0.0.1:$amqp" >"$dir/broker.log" 2>&1 &
  register sink "$port" $! 30 || return 1
  wait_port "$amqp" 30 || return 1
  AMQP_URL[sink]="amqp://127.0.0.1:$amqp"
}

# ActiveMQ Classic's AMQP transport is not in Debian's package: its jar and
# proton-j come from Maven Central, into the instance's lib/ (activemq.base).
ACTIVEMQ_AMQP_JARS="org.apache.activemq:activemq-amqp:5.17.2 org.apache.qpid:proton-j:0.34.0"

start_activemq() {
  local dir=$1 port amqp artifact jars="$CACHE/activemq-amqp"
  mkdir -p "$dir/conf" "$dir/data" "$dir/lib" "$jars"
  apt_install activemq || return 1
  for artifact in $ACTIVEMQ_AMQP_JARS; do
    ls "$jars"/"$(echo "$artifact" | cut -d: -f2)"-*.jar >/dev/null 2>&1 && continue
    mvn -q dependency:copy -Dartifact="$artifact" -DoutputDirectory="$jars" >>"$dir/mvn.log" 2>&1 || true
  done
  cp "$jars"/*.jar "$dir/lib/" 2>/dev/null || true
  port=$(free_port); amqp=$(free_port)
  local amqp_connector=""
  ls "$dir"/lib/activemq-amqp-*.jar "$dir"/lib/proton-j-*.jar >/dev/null 2>&1 &&
    amqp_connector="<transportConnector name=\"amqp\" uri=\"amqp+nio://127.0.0.1:$amqp\"/>"
  cat >"$dir/conf/activemq.xml" <<XML
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans-2.0.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" useJmx="false" brokerName="weir-compare"
          dataDirectory="$dir/data" schedulerSupport="true">
    $(tls_activemq_context)
    <persistenceAdapter><kahaDB directory="$dir/data/kahadb"/></persistenceAdapter>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp+nio://127.0.0.1:$port"/>
      $amqp_connector
      $(tls_activemq_connectors "$amqp_connector")
    </transportConnectors>
  </broker>
</beans>
XML
  java -Xms512M -Xmx512M -Dactivemq.classpath="$dir" -Dactivemq.home=/usr/share/activemq \
    -Dactivemq.base="$dir" -Dactivemq.conf="$dir/conf" -Dactivemq.data="$dir/data" \
    -jar /usr/share/activemq/bin/activemq.jar start "xbean:file:$dir/conf/activemq.xml" \
    >"$dir/broker.log" 2>&1 &
  register activemq "$port" $! 120 || return 1
  if [ -n "$amqp_connector" ] && wait_port "$amqp" 30; then
    AMQP_URL[activemq]="amqp://127.0.0.1:$amqp"
  fi
  tls_activemq
}

start_rabbitmq() {
  local dir=$1 port amqp dist
  mkdir -p "$dir"
  apt_install rabbitmq-server || return 1
  port=$(free_port); amqp=$(free_port); dist=$(free_port)
  local plugins=rabbitmq_stomp
  ls -d /usr/lib/rabbitmq/lib/*/plugins/rabbitmq_amqp1_0-* >/dev/null 2>&1 && plugins="$plugins,rabbitmq_amqp1_0"
  echo "[$plugins]." >"$dir/enabled_plugins"
  cat >"$dir/rabbitmq.conf" <<CONF
listeners.tcp.default = 127.0.0.1:$amqp
stomp.listeners.tcp.1 = 127.0.0.1:$port
loopback_users = none
$(tls_rabbitmq_conf)
CONF
  local epmd_before
  epmd_before=$(pgrep -x epmd || true)
  # The Debian wrapper in /usr/sbin switches to the rabbitmq user; the real
  # script runs as us with everything under $dir.
  env HOME="$dir" RABBITMQ_NODENAME="weircompare$$@localhost" RABBITMQ_DIST_PORT="$dist" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    ERL_EPMD_ADDRESS=127.0.0.1 \
    /usr/lib/rabbitmq/bin/rabbitmq-server >"$dir/broker.log" 2>&1 &
  register rabbitmq "$port" $! 120 || return 1
  # epmd, if this start launched it, is ours to stop as well.
  if [ -z "$epmd_before" ]; then
    local epmd
    epmd=$(pgrep -x epmd || true)
    [ -n "$epmd" ] && STARTED+=("$epmd")
  fi
  LOGIN[rabbitmq]="--login guest --passcode guest"
  # AMQP 1.0 shares the AMQP 0-9-1 listener; /queue/NAME is the queue NAME.
  if [[ $plugins == *rabbitmq_amqp1_0* ]]; then
    AMQP_URL[rabbitmq]="amqp://127.0.0.1:$amqp"
    AMQP_QUEUE_PREFIX[rabbitmq]="/queue/"
  fi
  tls_rabbitmq
}

start_artemis() {
  local dir=$1 core amqp port home
  mkdir -p "$dir" "$CACHE"
  home="$CACHE/apache-artemis-$ARTEMIS_VERSION"
  if [ ! -x "$home/bin/artemis" ]; then
    mvn -q dependency:get -Dtransitive=false \
      -Dartifact="org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" >"$dir/mvn.log" 2>&1 || return 1
    tar xzf "$HOME/.m2/repository/org/apache/activemq/apache-artemis/$ARTEMIS_VERSION/apache-artemis-$ARTEMIS_VERSION-bin.tar.gz" -C "$CACHE" || return 1
  fi
  core=$(free_port); amqp=$(free_port); port=$(free_port)
  "$home/bin/artemis" create "$dir/instance" --user admin --password admin --allow-anonymous \
    --host 127.0.0.1 --no-web --no-hornetq-acceptor --no-mqtt-acceptor --silent --force \
    --java-memory 512M >"$dir/create.log" 2>&1 || return 1
  # Our ports, and STOMP's /queue/ and /topic/ prefixes mapped to anycast and
  # multicast so /queue/NAME is a queue as in every other broker here.
  sed -i -e "s#tcp://127.0.0.1:61616?#tcp://127.0.0.1:$core?#" \
    -e "s#tcp://127.0.0.1:5672?#tcp://127.0.0.1:$amqp?#" \
    -e "s#tcp://127.0.0.1:61613?\(.*\)protocols=STOMP;#tcp://127.0.0.1:$port?\1protocols=STOMP;anycastPrefix=/queue/;multicastPrefix=/topic/;#" \
    "$dir/instance/etc/broker.xml"
  tls_artemis_acceptors "$dir/instance/etc/broker.xml" "$port" "$amqp"
  "$dir/instance/bin/artemis" run >"$dir/broker.log" 2>&1 &
  register artemis "$port" $! 120 || return 1
  # Anonymous SASL; the `queue` capability makes the address anycast.
  AMQP_URL[artemis]="amqp://127.0.0.1:$amqp"
  tls_artemis
}
