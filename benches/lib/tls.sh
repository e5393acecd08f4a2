# TLS for benches/compare: the tls-* scenarios (tls-1to1-256-np over STOMP, its -amqp twin
# over AMQP 1.0) run `weir perf` over stomps:// and amqps:// against a TLS listener of
# each broker, next to its plain ones. `tls_prepare DIR SCENARIOS` makes the certificates
# (openssl: a CA, and a server certificate for localhost and 127.0.0.1, as PEM and as a
# PKCS12 keystore for the Java brokers) when a tls-* scenario is asked for; each start
# function then calls its tls_NAME hooks: the first ones (run in a subshell, inside the
# config they write) add the listeners and keep their ports in $TLS_DIR/ports-NAME, the
# last one waits for them and sets STOMPS_URL[NAME] and AMQPS_URL[NAME].
# Callers: benches/compare and benches/lib/brokers.sh.

declare -A STOMPS_URL AMQPS_URL
TLS_DIR=""
TLS_PASSWORD=weircompare

tls_prepare() {
  local dir=$1 scenarios=$2
  case " $scenarios " in *" tls-"*) ;; *) return 0 ;; esac
  mkdir -p "$dir"
  # P-256 keys: what each broker's default TLS 1.3 (or 1.2) suites sign with cheaply.
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7 \
    -subj "/CN=weir compare CA" -keyout "$dir/ca.key" -out "$dir/ca.pem" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -subj "/CN=localhost" -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -days 7 -extfile "$dir/server.ext" -out "$dir/server.pem" 2>/dev/null
  openssl pkcs12 -export -in "$dir/server.pem" -inkey "$dir/server.key" -name server \
    -passout "pass:$TLS_PASSWORD" -out "$dir/server.p12"
  TLS_DIR=$dir
}

# The flags a tls-* scenario adds to `weir perf`.
tls_args() {
  case "$1" in tls-*) echo "--tls-ca $TLS_DIR/ca.pem" ;; esac
}

# Weir: a config file with the two TLS listeners and the settings of the embedded
# default (the plain listeners and the data dir come from the command line).
tls_weir_config() {
  local dir=$1 stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  stomps=$(free_port); amqps=$(free_port)
  cat >"$dir/weir-tls.toml" <<TOML
[broker]
auto_create_queues = true
[store]
fsync = "always"
[[acceptors.extra]]
name = "stomps"
bind = "127.0.0.1:$stomps"
protocols = ["stomp"]
tls = true
[[acceptors.extra]]
name = "amqps"
bind = "127.0.0.1:$amqps"
protocols = ["amqp"]
tls = true
[tls]
cert_file = "$TLS_DIR/server.pem"
key_file = "$TLS_DIR/server.key"
TOML
  echo "$stomps $amqps" >"$TLS_DIR/ports-weir"
  echo "--config $dir/weir-tls.toml"
}

tls_weir() {
  local stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  read -r stomps amqps <"$TLS_DIR/ports-weir"
  wait_port "$stomps" 30 && STOMPS_URL[weir]="stomps://127.0.0.1:$stomps"
  wait_port "$amqps" 30 && AMQPS_URL[weir]="amqps://127.0.0.1:$amqps"
  return 0
}

# ActiveMQ Classic: the keystore in an sslContext, and NIO+SSL connectors.
tls_activemq_context() {
  [ -n "$TLS_DIR" ] || return 0
  echo "<sslContext><sslContext keyStore=\"file:$TLS_DIR/server.p12\" keyStoreType=\"PKCS12\" keyStorePassword=\"$TLS_PASSWORD\"/></sslContext>"
}

tls_activemq_connectors() {
  local amqp_too=$1 stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  stomps=$(free_port); amqps=$(free_port)
  echo "$stomps $amqps" >"$TLS_DIR/ports-activemq"
  echo "<transportConnector name=\"stomp-ssl\" uri=\"stomp+nio+ssl://127.0.0.1:$stomps\"/>"
  [ -n "$amqp_too" ] && echo "<transportConnector name=\"amqp-ssl\" uri=\"amqp+nio+ssl://127.0.0.1:$amqps\"/>"
  return 0
}

tls_activemq() {
  local stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  read -r stomps amqps <"$TLS_DIR/ports-activemq"
  wait_port "$stomps" 30 && STOMPS_URL[activemq]="stomps://127.0.0.1:$stomps"
  [ -n "${AMQP_URL[activemq]:-}" ] && wait_port "$amqps" 30 && AMQPS_URL[activemq]="amqps://127.0.0.1:$amqps"
  return 0
}

# RabbitMQ: the PEM files in ssl_options, an SSL listener for AMQP (1.0 shares it with
# 0-9-1) and one for STOMP.
tls_rabbitmq_conf() {
  local stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  stomps=$(free_port); amqps=$(free_port)
  echo "$stomps $amqps" >"$TLS_DIR/ports-rabbitmq"
  cat <<CONF
listeners.ssl.default = 127.0.0.1:$amqps
stomp.listeners.ssl.1 = 127.0.0.1:$stomps
ssl_options.cacertfile = $TLS_DIR/ca.pem
ssl_options.certfile = $TLS_DIR/server.pem
ssl_options.keyfile = $TLS_DIR/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
CONF
}

tls_rabbitmq() {
  local stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  read -r stomps amqps <"$TLS_DIR/ports-rabbitmq"
  wait_port "$stomps" 30 && STOMPS_URL[rabbitmq]="stomps://127.0.0.1:$stomps"
  [ -n "${AMQP_URL[rabbitmq]:-}" ] && wait_port "$amqps" 30 && AMQPS_URL[rabbitmq]="amqps://127.0.0.1:$amqps"
  return 0
}

# Artemis: a copy of its STOMP and AMQP acceptors (same tuning), on ports of their own,
# with sslEnabled and the PKCS12 keystore.
tls_artemis_acceptors() {
  local xml=$1 stomp=$2 amqp=$3 stomps amqps ssl
  [ -n "$TLS_DIR" ] || return 0
  stomps=$(free_port); amqps=$(free_port)
  echo "$stomps $amqps" >"$TLS_DIR/ports-artemis"
  ssl="sslEnabled=true;keyStoreType=PKCS12;keyStorePath=$TLS_DIR/server.p12;keyStorePassword=$TLS_PASSWORD;"
  sed -i \
    -e "/<acceptor name=\"stomp\">/{p;s#name=\"stomp\"#name=\"stomp-tls\"#;s#tcp://127.0.0.1:$stomp?#tcp://127.0.0.1:$stomps?$ssl#}" \
    -e "/<acceptor name=\"amqp\">/{p;s#name=\"amqp\"#name=\"amqp-tls\"#;s#tcp://127.0.0.1:$amqp?#tcp://127.0.0.1:$amqps?$ssl#}" \
    "$xml"
}

tls_artemis() {
  local stomps amqps
  [ -n "$TLS_DIR" ] || return 0
  read -r stomps amqps <"$TLS_DIR/ports-artemis"
  wait_port "$stomps" 60 && STOMPS_URL[artemis]="stomps://127.0.0.1:$stomps"
  wait_port "$amqps" 60 && AMQPS_URL[artemis]="amqps://127.0.0.1:$amqps"
  return 0
}
