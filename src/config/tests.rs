use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::core::settings::DelayOverMax;

use super::*;

const REFERENCE: &str = include_str!("../../config/weir.toml");

fn load(text: &str) -> Config {
    match Config::from_toml_str(text) {
        Ok(c) => c,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn error(text: &str) -> String {
    match Config::from_toml_str(text) {
        Ok(_) => panic!("accepted invalid config:\n{text}"),
        Err(e) => {
            let line = e.to_string();
            assert!(!line.contains('\n'), "not one line: {line:?}");
            line
        }
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn reference_file_loads_with_its_examples() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/weir.toml");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.acceptors().stomp, Some(addr("127.0.0.1:61613")));
    assert_eq!(c.acceptors().amqp, Some(addr("127.0.0.1:5672")));
    let listeners = c.listeners();
    assert_eq!(listeners.len(), 3);
    assert_eq!(listeners[2].name, "all-protocols");
    assert_eq!(
        listeners[2].protocols,
        vec![Protocol::Stomp, Protocol::Amqp]
    );
    assert_eq!(listeners[2].connection_factory.as_deref(), Some("grouped"));
    assert!(c.connection_factory("grouped").is_some_and(|f| f.autogroup));
    assert!(c.allow_anonymous());

    let queues = c.declared_queues();
    assert_eq!(queues.len(), 1);
    let (name, s) = &queues[0];
    assert_eq!(name, "orders.eu");
    assert!(s.durable, "from orders.#");
    assert_eq!(s.group_buckets, 1024);
    assert_eq!(s.max_delivery_attempts, 5, "inline key");
    assert_eq!(s.redelivery_delay, Duration::from_millis(250));
    let delayed = c.settings_table().resolve("delayed.x");
    assert_eq!(delayed.default_message_delay, Duration::from_secs(30));
    assert_eq!(delayed.delay_over_max, DelayOverMax::Clamp);
    assert!(!delayed.durable);
}

#[test]
fn reference_queue_defaults_match_the_built_in_defaults() {
    let c = load(REFERENCE);
    assert_eq!(c.settings_table().defaults(), &QueueSettings::default());
    assert_eq!(c.limits(), load("").limits());
    assert_eq!(c.store(), load("").store());
    assert_eq!(c.broker(), load("").broker());
}

#[test]
fn reference_commented_examples_parse() {
    let uncommented = REFERENCE
        .replace(
            "# [[users]]\n# name = \"admin\"\n# credential",
            "[[users]]\nname = \"admin\"\ncredential",
        )
        .replace("# allow_anonymous = true", "allow_anonymous = true");
    let c = load(&uncommented);
    assert_eq!(c.users().len(), 1, "users example not found in weir.toml");
    assert!(c.allow_anonymous());
    // The example's password is the one its comment names.
    match &c.users()[0].secret {
        crate::config::Secret::Credential(cred) => assert!(cred.verify_password("change-me")),
        crate::config::Secret::Password(_) => panic!("the example should show a credential"),
    }
}

#[test]
fn embedded_default_is_the_documented_default() {
    let c = Config::embedded_default();
    assert_eq!(c.acceptors().stomp, Some(addr("127.0.0.1:61613")));
    assert_eq!(c.acceptors().amqp, Some(addr("127.0.0.1:5672")));
    assert!(c.acceptors().extra.is_empty());
    assert_eq!(c.data_dir(), Path::new("./weir-data"));
    assert!(c.broker().auto_create_queues);
    assert!(c.settings_table().resolve("anything").auto_create);
    assert!(c.users().is_empty());
    assert!(c.allow_anonymous());
    assert_eq!(c.store().fsync, FsyncPolicy::Always);
    assert!(c.declared_queues().is_empty());

    let empty = load("");
    assert_eq!(c.broker(), empty.broker());
    assert_eq!(c.acceptors(), empty.acceptors());
    assert_eq!(c.store(), empty.store());
    assert_eq!(c.limits(), empty.limits());
    assert_eq!(c.security(), empty.security());
    assert_eq!(
        c.settings_table().defaults(),
        empty.settings_table().defaults()
    );
}

#[test]
fn value_errors_name_the_key() {
    let cases = [
        (
            "[queue_defaults]\nmax_message_delay = \"15x\"",
            "config: queue_defaults.max_message_delay: \"15x\" is not a duration (use e.g. 250ms, 30s, 15m)",
        ),
        (
            "[limits]\nmax_frame_size = 100",
            "config: limits.max_frame_size: must be between 1024 and 1073741824",
        ),
        (
            "[limits]\nmax_frame_size = \"2GiB\"",
            "config: limits.max_frame_size: must be between 1024 and 1073741824",
        ),
        (
            "[limits]\nmax_message_size = \"10XB\"",
            "config: limits.max_message_size: \"10XB\" is not a size (use e.g. 65536, 64KiB, 10MiB)",
        ),
        (
            "[limits]\nmax_transaction_ops = 0",
            "config: limits.max_transaction_ops: must be between 1 and 100000000",
        ),
        (
            "[limits]\nmax_transaction_bytes = 100",
            "config: limits.max_transaction_bytes: must be between 1024 and 68719476736",
        ),
        (
            "[limits]\nmax_open_transactions = 0",
            "config: limits.max_open_transactions: must be between 1 and 1000000",
        ),
        (
            "[limits]\nheartbeat = \"50ms\"",
            "config: limits.heartbeat: must be 0 or between 100ms and 1h",
        ),
        (
            "[limits]\nmax_frame_size = \"4KiB\"\nmax_header_length = \"8KiB\"",
            "config: limits.max_header_length: 8192 exceeds max_frame_size (4096)",
        ),
        (
            "[queue_defaults]\ndefault_message_delay = \"20m\"",
            "config: queue_defaults.default_message_delay: 20m exceeds max_message_delay (15m)",
        ),
        (
            "[queue_defaults]\nmax_message_delay = \"1m\"\n[address_settings.\"a.*\"]\ndefault_message_delay = \"2m\"",
            "config: address_settings.\"a.*\".default_message_delay: 2m exceeds max_message_delay (1m)",
        ),
        (
            "[[queues]]\nname = \"q\"\nredelivery_delay = \"1h\"",
            "config: queues[0].redelivery_delay: 1h exceeds max_redelivery_delay (10m)",
        ),
        (
            "[address_settings.\"orders.#\"]\ngroup_buckets = -2",
            "config: address_settings.\"orders.#\".group_buckets: must be at least -1",
        ),
        (
            "[queue_defaults]\nredelivery_multiplier = 0.5",
            "config: queue_defaults.redelivery_multiplier: must be at least 1",
        ),
        (
            "[queue_defaults]\nmax_delivery_attempts = 0",
            "config: queue_defaults.max_delivery_attempts: must be at least 1",
        ),
        (
            "[acceptors]\nstomp = \"localhost:61613\"",
            "config: acceptors.stomp: \"localhost:61613\" is not a socket address (use e.g. 127.0.0.1:61613 or [::]:5672)",
        ),
        (
            "[[acceptors.extra]]\nname = \"x\"\nbind = \"127.0.0.1:5672\"",
            "config: acceptors.extra[0].bind: 127.0.0.1:5672 is already used by acceptors.amqp",
        ),
        (
            "[[acceptors.extra]]\nname = \"x\"\nbind = \"127.0.0.1:7000\"\nconnection_factory = \"nope\"",
            "config: acceptors.extra[0].connection_factory: no connection factory named \"nope\" (declare it as [connection_factories.nope])",
        ),
        (
            "[[acceptors.extra]]\nname = \"x\"\nbind = \"127.0.0.1:7000\"\nprotocols = []",
            "config: acceptors.extra[0].protocols: must list at least one of \"stomp\", \"amqp\"",
        ),
        (
            "[[acceptors.extra]]\nname = \"stomp\"\nbind = \"127.0.0.1:7000\"",
            "config: acceptors.extra[0].name: \"stomp\" is declared twice",
        ),
        (
            "[store]\nfsync = \"always\"\nbatch_window = \"5ms\"",
            "config: store.batch_window: only applies when fsync = \"batched\"",
        ),
        (
            "[store]\nfsync = \"batched\"\nbatch_window = \"0\"",
            "config: store.batch_window: must be between 1us and 1s",
        ),
        (
            "[store]\nmax_batch = 0",
            "config: store.max_batch: must be between 1 and 100000",
        ),
        (
            "[broker]\nworker_threads = 0",
            "config: broker.worker_threads: must be between 1 and 1024",
        ),
        (
            "[store]\nmax_disk_usage = 0",
            "config: store.max_disk_usage: must be between 1 and 100",
        ),
        (
            "[store]\nmax_disk_usage = 101",
            "config: store.max_disk_usage: must be between 1 and 100",
        ),
        (
            "[store]\nhold_for_ack = \"2s\"",
            "config: store.hold_for_ack: must be 0 or between 1us and 1s",
        ),
        (
            "[connection_factories.f]\nautogroup = true\ngroup_id = \"g\"",
            "config: connection_factories.f: set autogroup or group_id, not both",
        ),
        (
            "[[users]]\nname = \"a\"\npassword = \"p\"\n[[users]]\nname = \"a\"\npassword = \"q\"",
            "config: users[1].name: \"a\" is declared twice",
        ),
        (
            "[[users]]\nname = \"a\"\npassword = \"\"",
            "config: users[0].password: must not be empty",
        ),
        (
            "[[queues]]\nname = \"q\"\n[[queues]]\nname = \"q\"",
            "config: queues[1].name: \"q\" is declared twice",
        ),
        (
            "[[queues]]\nname = \"orders.#\"",
            "config: queues[0].name: \"orders.#\" contains a * or # word; a declared queue needs a literal name",
        ),
        (
            "[address_settings.\"orders..eu\"]\ndurable = true",
            "config: address_settings.\"orders..eu\": \"orders..eu\" has an empty word (write words separated by '.', with * and # as wildcards)",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(error(text), want, "for:\n{text}");
    }
}

#[test]
fn schema_errors_name_the_key() {
    let cases = [
        (
            "[broker]\nnmae = \"x\"",
            "config: broker.nmae: unknown field `nmae`",
        ),
        (
            "[brokr]\nname = \"x\"",
            "config: brokr: unknown field `brokr`",
        ),
        (
            "[address_settings.\"orders.#\"]\ndurabel = true",
            "config: address_settings.\"orders.#\".durabel: unknown field `durabel`",
        ),
        (
            "[[queues]]\nname = \"q\"\nmax_delay = \"1s\"",
            "config: queues[0].max_delay: unknown field `max_delay`",
        ),
        (
            "[broker]\nauto_create_queues = \"yes\"",
            "config: broker.auto_create_queues: invalid type: string \"yes\"",
        ),
        (
            "[store]\nfsync = \"sometimes\"",
            "config: store.fsync: unknown variant `sometimes`",
        ),
        (
            "[queue_defaults]\ndelay_over_max = \"drop\"",
            "config: queue_defaults.delay_over_max: unknown variant `drop`",
        ),
        (
            "[queue_defaults]\nredelivery_delay = -5",
            "config: queue_defaults.redelivery_delay: invalid value: integer `-5`",
        ),
        (
            "[[users]]\nname = \"a\"",
            "config: users[0]: missing field `credential` (or `password`)",
        ),
        (
            "[[users]]\nname = \"a\"\npassword = \"p\"\ncredential = \"x\"",
            "config: users[0]: give either `credential`",
        ),
        (
            "[[users]]\nname = \"a\"\ncredential = \"SCRAM-SHA-256$12:AAAA$AAAA:AAAA\"",
            "config: users[0].credential: iterations must be 4096 to 10000000",
        ),
        (
            "[[users]]\nname = \"a\"\ncredential = \"SCRAM-MD5$4096:AAAA$AAAA:AAAA\"",
            "config: users[0].credential: unknown mechanism 'SCRAM-MD5'",
        ),
        (
            "[security]\nlogin_failure_delay = \"2m\"",
            "config: security.login_failure_delay: must be 0 or between",
        ),
    ];
    for (text, want) in cases {
        let got = error(text);
        assert!(
            got.starts_with(want),
            "for:\n{text}\ngot:  {got}\nwant: {want}..."
        );
    }
}

#[test]
fn syntax_errors_give_line_and_column() {
    assert_eq!(
        error("[broker]\nname = \"weir\"\ndata_dir = "),
        "config: line 3, column 12: not valid TOML"
    );
    assert_eq!(
        error("x = [1,"),
        "config: line 1, column 8: invalid array; expected `]`"
    );
}

#[test]
fn missing_file_is_a_read_error() {
    let err = Config::load(Path::new("/nonexistent/weir.toml")).err();
    assert!(matches!(err, Some(ConfigError::Read { .. })));
    let line = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        line.starts_with("config: cannot read /nonexistent/weir.toml: "),
        "{line}"
    );
}

#[test]
fn patterns_and_inline_queue_keys_resolve() {
    let c = load(
        r#"
        [queue_defaults]
        expiry_address = "EXP"
        [address_settings."orders.#"]
        dead_letter_address = ""
        max_delivery_attempts = 3
        [address_settings."orders.eu"]
        max_delivery_attempts = 4
        group_first_key = "JMSXGroupFirstForConsumer"
        [[queues]]
        name = "orders.eu"
        max_delivery_attempts = 7
        [[queues]]
        name = "plain"
        "#,
    );
    let table = c.settings_table();
    let us = table.resolve("orders.us");
    assert_eq!(us.dead_letter_address, None, "\"\" clears the default DLQ");
    assert_eq!(us.expiry_address.as_deref(), Some("EXP"), "absent inherits");
    assert_eq!(us.max_delivery_attempts, 3);
    let eu = table.resolve("orders.eu");
    assert_eq!(eu.max_delivery_attempts, 7, "a queue's own keys win");
    assert_eq!(
        eu.group_first_key.as_deref(),
        Some("JMSXGroupFirstForConsumer")
    );
    assert_eq!(
        table.resolve("other").dead_letter_address.as_deref(),
        Some("DLQ")
    );
    let names: Vec<String> = c.declared_queues().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["orders.eu", "plain"]);
}

#[test]
fn broker_switches_are_the_base_of_queue_settings() {
    let c = load("[broker]\nauto_create_queues = false\n[limits]\ndefault_prefetch = 50");
    assert!(!c.settings_table().defaults().auto_create);
    assert_eq!(c.settings_table().defaults().default_prefetch, 50);
    let c = load("[limits]\ndefault_prefetch = 50\n[queue_defaults]\ndefault_prefetch = 7");
    assert_eq!(c.settings_table().defaults().default_prefetch, 7);
    assert_eq!(c.limits().default_prefetch, 50);
}

#[test]
fn units_accept_integers_and_text() {
    let c = load(
        "[limits]\nmax_frame_size = 65536\nmax_message_size = \"1GiB\"\nheartbeat = 0\n\
         [queue_defaults]\nredelivery_delay = 500\nmax_message_delay = \"1h30m\"",
    );
    assert_eq!(c.limits().max_frame_size, 65_536);
    assert_eq!(c.limits().max_message_size, 1 << 30);
    assert_eq!(c.limits().heartbeat, Duration::ZERO);
    let d = c.settings_table().defaults().clone();
    assert_eq!(d.redelivery_delay, Duration::from_millis(500));
    assert_eq!(d.max_message_delay, Duration::from_secs(5_400));
}

#[test]
fn delay_before_dispatch_takes_minus_one_for_no_limit() {
    let limit = |value: &str| {
        load(&format!(
            "[queue_defaults]\ndelay_before_dispatch = {value}"
        ))
        .settings_table()
        .defaults()
        .delay_before_dispatch
    };
    assert_eq!(
        load("").settings_table().defaults().delay_before_dispatch,
        None
    );
    assert_eq!(limit("-1"), None);
    assert_eq!(limit("\"-1\""), None);
    assert_eq!(limit("\"0\""), Some(Duration::ZERO));
    assert_eq!(limit("0"), Some(Duration::ZERO));
    assert_eq!(limit("\"500ms\""), Some(Duration::from_millis(500)));
    assert_eq!(limit("250"), Some(Duration::from_millis(250)));
    // A pattern may lift an inherited limit again.
    let c = load(
        "[queue_defaults]\ndelay_before_dispatch = \"1s\"\n\
         [address_settings.\"slow.#\"]\ndelay_before_dispatch = -1",
    );
    assert_eq!(
        c.settings_table().resolve("slow.q").delay_before_dispatch,
        None
    );
    assert_eq!(
        c.settings_table().resolve("other").delay_before_dispatch,
        Some(Duration::from_secs(1))
    );
    assert!(error("[queue_defaults]\ndelay_before_dispatch = -2").starts_with(
        "config: queue_defaults.delay_before_dispatch: invalid value: integer `-2`, expected -1 for no time limit"
    ));
    assert_eq!(
        error("[queue_defaults]\ndelay_before_dispatch = \"-5s\""),
        "config: queue_defaults.delay_before_dispatch: \"-5s\" is not a duration (use e.g. 250ms, 30s, 15m)"
    );
}

#[test]
fn delay_headers_name_their_unit() {
    use crate::core::delay_headers::{DelayHeader, DelayUnit};
    assert_eq!(
        load("").settings_table().defaults().delay_headers,
        DelayHeader::defaults()
    );
    let c = load(
        "[queue_defaults]\ndelay_headers = [\"retry-in:s\", \"x-delay:ms\"]\n\
         [address_settings.\"plain.#\"]\ndelay_headers = []",
    );
    let table = c.settings_table();
    let headers = &table.defaults().delay_headers;
    let named: Vec<(&str, DelayUnit)> = headers.iter().map(|h| (&*h.name, h.unit)).collect();
    assert_eq!(
        named,
        [
            ("retry-in", DelayUnit::Seconds),
            ("x-delay", DelayUnit::Millis)
        ]
    );
    assert!(c
        .settings_table()
        .resolve("plain.q")
        .delay_headers
        .is_empty());
    let cases = [
        (
            "[queue_defaults]\ndelay_headers = [\"x-delay:ms\", \"delay\"]",
            "config: queue_defaults.delay_headers[1]: \"delay\" is not NAME:ms or NAME:s (a property name and the unit of its value)",
        ),
        (
            "[[queues]]\nname = \"q\"\ndelay_headers = [\"AMQ_SCHEDULED_DELAY:ms\"]",
            "config: queues[0].delay_headers[0]: \"AMQ_SCHEDULED_DELAY\" is always read as a delay; list only other names",
        ),
        (
            "[queue_defaults]\ndelay_headers = [\"d:s\", \"d:ms\"]",
            "config: queue_defaults.delay_headers[1]: \"d\" is declared twice",
        ),
        (
            "[queue_defaults]\ndelay_headers = [\":s\"]",
            "config: queue_defaults.delay_headers[0]: \":s\" has no name before its unit",
        ),
    ];
    for (text, want) in cases {
        assert_eq!(error(text), want, "for:\n{text}");
    }
}

#[test]
fn fsync_policies() {
    assert_eq!(
        load("[store]\nfsync = \"always\"").store().fsync,
        FsyncPolicy::Always
    );
    assert_eq!(
        load("[store]\nfsync = \"never\"").store().fsync,
        FsyncPolicy::Never
    );
    assert_eq!(
        load("[store]\nfsync = \"batched\"\nbatch_window = \"500us\"\nmax_batch = 64").store(),
        &StoreConfig {
            fsync: FsyncPolicy::Batched {
                window: Duration::from_micros(500)
            },
            max_batch: 64,
            hold_for_ack: Duration::from_millis(5),
            max_disk_usage: 90,
            min_free_disk: 64 << 20,
        }
    );
    assert_eq!(
        load("[store]\nhold_for_ack = \"0\"").store().hold_for_ack,
        Duration::ZERO
    );
}

#[test]
fn anonymous_access_follows_users() {
    let with_user = "[[users]]\nname = \"app\"\npassword = \"secret\"";
    let c = load(with_user);
    assert!(!c.allow_anonymous());
    assert_eq!(c.users()[0].name, "app");
    assert!(!format!("{:?}", c.users()).contains("secret"));
    assert_eq!(c.security().login_failure_delay, Duration::from_secs(1));
    let c = load("[security]\nlogin_failure_delay = \"50ms\"");
    assert_eq!(c.security().login_failure_delay, Duration::from_millis(50));
    let c = load(&format!("{with_user}\n[security]\nallow_anonymous = true"));
    assert!(c.allow_anonymous());
    assert!(!load("[security]\nallow_anonymous = false").allow_anonymous());
}

#[test]
fn acceptors_can_be_turned_off_in_the_file() {
    let c = load("[acceptors]\namqp = \"\"\nstomp = \"[::1]:0\"");
    assert_eq!(c.acceptors().amqp, None);
    let listeners = c.listeners();
    assert_eq!(listeners.len(), 1);
    assert_eq!(listeners[0].protocols, vec![Protocol::Stomp]);
    assert_eq!(listeners[0].bind, addr("[::1]:0"));
}

#[test]
fn cli_style_overrides() {
    let mut c = Config::embedded_default();
    c.set_data_dir(PathBuf::from("/var/lib/weir"));
    c.set_stomp_addr(None);
    c.set_amqp_addr(Some(addr("0.0.0.0:5673")));
    assert_eq!(c.data_dir(), Path::new("/var/lib/weir"));
    let listeners = c.listeners();
    assert_eq!(listeners.len(), 1);
    assert_eq!(listeners[0].name, "amqp");
    assert_eq!(listeners[0].bind, addr("0.0.0.0:5673"));
}

#[test]
fn grouping_handler_is_refused_until_clustering_exists() {
    let want = "config: grouping_handler: not supported yet (clustered message grouping comes \
                with clustering; a single broker groups on its own)";
    for text in [
        "[grouping_handler]\nname = \"g\"\ntype = \"LOCAL\"\naddress = \"orders\"",
        "[grouping_handler]",
        "[grouping_handler]\nanything = 1",
    ] {
        assert_eq!(error(text), want, "for:\n{text}");
    }
    let err = Config::from_toml_str("[grouping_handler]").err();
    assert!(matches!(
        err,
        Some(ConfigError::Key {
            problem: Problem::NotSupportedYet(_),
            ..
        })
    ));
}

#[test]
fn worker_threads_default_to_half_the_cores() {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(load("").broker().worker_threads, (cores / 2).max(1));
    assert_eq!(
        load("[broker]\nworker_threads = 3").broker().worker_threads,
        3
    );
}

#[test]
fn transaction_limits_are_read_and_default_to_the_core_defaults() {
    let core = crate::core::TransactionLimits::default();
    let c = load("");
    assert_eq!(c.limits().max_transaction_ops, core.max_ops);
    assert_eq!(c.limits().max_transaction_bytes, core.max_bytes);
    assert_eq!(c.limits().max_open_transactions, core.max_open);
    let c = load(
        "[limits]\nmax_transaction_ops = 10\nmax_transaction_bytes = \"1MiB\"\n\
         max_open_transactions = 2",
    );
    assert_eq!(c.limits().max_transaction_ops, 10);
    assert_eq!(c.limits().max_transaction_bytes, 1 << 20);
    assert_eq!(c.limits().max_open_transactions, 2);
}

#[test]
fn disk_limits_are_read_with_units() {
    let config = load("[store]\nmax_disk_usage = 97\nmin_free_disk = \"1GiB\"");
    assert_eq!(config.store().max_disk_usage, 97);
    assert_eq!(config.store().min_free_disk, 1 << 30);
    assert_eq!(load("[store]\nmin_free_disk = 0").store().min_free_disk, 0);
}

#[test]
fn memory_limits_are_read_with_units_and_minus_one() {
    use crate::core::memory::{default_global_max_size, AddressFullPolicy};
    let c = load(
        "[broker]\nglobal_max_size = \"512MiB\"\n\
         [queue_defaults]\nmax_size_bytes = \"1MiB\"\naddress_full_policy = \"BLOCK\"\n\
         [address_settings.\"free.#\"]\nmax_size_bytes = -1\naddress_full_policy = \"DROP\"",
    );
    assert_eq!(c.broker().global_max_size, 512 << 20);
    let table = c.settings_table();
    let q = table.resolve("q");
    assert_eq!(q.max_size_bytes, Some(1 << 20));
    assert_eq!(q.address_full_policy, AddressFullPolicy::Block);
    let free = table.resolve("free.x");
    assert_eq!(free.max_size_bytes, None);
    assert_eq!(free.address_full_policy, AddressFullPolicy::Drop);
    assert_eq!(
        load("[broker]\nglobal_max_size = -1")
            .broker()
            .global_max_size,
        default_global_max_size()
    );
    let default = load("");
    assert_eq!(default.broker().global_max_size, default_global_max_size());
    let q = default.settings_table().resolve("q");
    assert_eq!(
        (q.max_size_bytes, q.address_full_policy),
        (None, AddressFullPolicy::Page)
    );
    for (text, want) in [
        (
            "[broker]\nglobal_max_size = 0",
            "config: broker.global_max_size: must be between 1 and",
        ),
        (
            "[queue_defaults]\nmax_size_bytes = \"lots\"",
            "config: queue_defaults.max_size_bytes:",
        ),
        (
            "[queue_defaults]\naddress_full_policy = \"SPILL\"",
            "address_full_policy",
        ),
    ] {
        let Err(err) = Config::from_toml_str(text) else {
            panic!("{text}: accepted");
        };
        let err = err.to_string();
        assert!(err.contains(want), "{text}: {err}");
    }
}

#[test]
fn permissions_name_known_roles_and_resolve_to_the_most_specific_pattern() {
    use crate::core::security::Permission;
    let users = "[[users]]\nname = \"a\"\npassword = \"p\"\nroles = [\"ops\"]\n";
    let c = load(&format!(
        "{users}[security.permissions.\"#\"]\nsend = [\"ops\"]\n\
         [security.permissions.\"orders.#\"]\nconsume = [\"ops\"]\n"
    ));
    let access = &c.security().access;
    let ops = access.users["a"].roles;
    assert!(access.permissions.allows(ops, "misc", Permission::Send));
    assert!(!access.permissions.allows(ops, "orders.x", Permission::Send));
    assert!(access
        .permissions
        .allows(ops, "orders.x", Permission::Consume));
    let e = error(&format!(
        "{users}[security.permissions.\"#\"]\nsend = [\"opps\"]\n"
    ));
    assert!(e.contains("security.permissions.\"#\".send"), "{e}");
    assert!(e.contains("no user holds role \"opps\""), "{e}");
    let e = error(&format!(
        "{users}[security.permissions.\"a..b\"]\nsend = [\"ops\"]\n"
    ));
    assert!(e.contains("empty word"), "{e}");
    let e = error(&format!(
        "{users}[security.permissions.\"#\"]\nsned = [\"ops\"]\n"
    ));
    assert!(e.contains("sned"), "{e}");
    assert!(!load(users).security().access.permissions.is_configured());
}

#[test]
fn anonymous_roles_and_per_user_limits_are_read() {
    let c = load(
        "[[users]]\nname = \"a\"\npassword = \"p\"\nmax_connections = 2\nmax_queues = 3\n\
         [security]\nallow_anonymous = true\nanonymous_roles = [\"guest\"]\n\
         [limits]\nmax_queues_per_user = 7\n",
    );
    assert!(c.security().allow_anonymous_set);
    assert_eq!(c.users()[0].max_connections, Some(2));
    assert_eq!(c.users()[0].max_queues, Some(3));
    assert_eq!(c.limits().max_queues_per_user, 7);
    assert_ne!(c.security().access.anonymous_roles, Default::default());
    assert!(!load("").security().allow_anonymous_set);
}

#[test]
fn reference_tls_examples_parse_when_uncommented() {
    let start = REFERENCE
        .find("# [[acceptors.extra]]\n# name = \"stomp-tls\"")
        .unwrap();
    // Up to the next section.
    let end = REFERENCE[start..].find("\n\n[").unwrap() + start;
    let tls_start = REFERENCE.find("# [tls]\n").unwrap();
    let tls_end = REFERENCE[tls_start..].find("\n\n").unwrap() + tls_start;
    let uncomment = |text: &str| {
        text.lines()
            .map(|l| l.strip_prefix("# ").unwrap_or(l.trim_start_matches('#')))
            .filter(|l| l.starts_with('[') || l.contains(" = "))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let text = format!(
        "{}\n{}\n{}",
        &REFERENCE[..tls_start],
        uncomment(&REFERENCE[tls_start..tls_end]),
        &REFERENCE[tls_end..]
    );
    let text = text.replacen(
        &REFERENCE[start..end],
        &uncomment(&REFERENCE[start..end]),
        1,
    );
    let c = load(&text);
    let tls: Vec<_> = c.listeners().into_iter().filter(|l| l.tls).collect();
    assert_eq!(tls.len(), 2, "the stomp-tls and amqps examples");
    assert_eq!(tls[0].bind.port(), 61614);
    assert_eq!(tls[1].bind.port(), 5671);
    let settings = c.tls().expect("the [tls] example");
    assert_eq!(settings.cert_file, Path::new("/etc/weir/tls/broker.crt"));
    assert_eq!(settings.client_auth, ClientAuth::None);
    assert_eq!(settings.external_user, ExternalUser::Cn);
}

#[test]
fn tls_settings_are_checked() {
    let tls = "[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
    let listener = "[[acceptors.extra]]\nname = \"s\"\nbind = \"127.0.0.1:61614\"\ntls = true\n";
    assert!(error(listener).contains("acceptors.extra[0].tls: needs a [tls] section"));
    let c = load(&format!(
        "{tls}ca_file = \"ca.pem\"\nclient_auth = \"required\"\nexternal_user = \"san_email\"\n{listener}"
    ));
    assert!(c.listeners().iter().any(|l| l.tls));
    let settings = c.tls().unwrap();
    assert_eq!(settings.client_auth, ClientAuth::Required);
    assert_eq!(settings.external_user, ExternalUser::SanEmail);
    assert!(error(&format!("{tls}client_auth = \"optional\"\n"))
        .contains("tls.client_auth: needs ca_file"));
    assert!(error("[tls]\nkey_file = \"k.pem\"\n").contains("tls.cert_file"));
    assert!(error(&format!("{tls}client_auth = \"maybe\"\n")).contains("tls.client_auth"));
    assert!(!load("").security().require_tls_for_passwords);
    assert!(
        load("[security]\nrequire_tls_for_passwords = true\n")
            .security()
            .require_tls_for_passwords
    );
}

#[test]
fn http_listens_on_its_default_unless_turned_off() {
    let c = load("");
    let http = c.http().expect("on by default");
    assert_eq!(http.bind.to_string(), "127.0.0.1:8161");
    assert!(!http.tls);
    assert!(load("[http]\nenabled = false\n").http().is_none());
    let c = load("[http]\nbind = \"0.0.0.0:9000\"\n[security]\nallow_anonymous = true\n");
    assert_eq!(c.http().unwrap().bind.port(), 9000);
}

#[test]
fn http_needs_tls_for_https_and_a_free_address() {
    assert!(error("[http]\ntls = true\n").contains("http.tls"));
    let e = error("[acceptors]\nstomp = \"127.0.0.1:9000\"\n[http]\nbind = \"127.0.0.1:9000\"\n");
    assert!(e.contains("http.bind"), "{e}");
    assert!(error("[http]\nbind = \"nowhere\"\n").contains("http.bind"));
}

#[test]
fn the_http_flag_keeps_the_tls_setting() {
    let mut c = load("");
    c.set_http_addr(None);
    assert!(c.http().is_none());
    c.set_http_addr(Some("127.0.0.1:1".parse().unwrap()));
    assert_eq!(c.http().unwrap().bind.port(), 1);
}

#[test]
fn the_websocket_listener_is_off_unless_bound() {
    assert!(load("").websocket().is_none());
    let c = load("[websocket]\nbind = \"127.0.0.1:61614\"\n");
    let ws = c.websocket().expect("configured");
    assert_eq!(ws.bind.port(), 61614);
    assert!(!ws.tls);
}

#[test]
fn the_websocket_listener_needs_tls_for_wss_and_a_free_address() {
    assert!(
        error("[websocket]\nbind = \"127.0.0.1:9001\"\ntls = true\n").contains("websocket.tls")
    );
    let e = error("[http]\nbind = \"127.0.0.1:9000\"\n[websocket]\nbind = \"127.0.0.1:9000\"\n");
    assert!(
        e.contains("websocket.bind") && e.contains("http.bind"),
        "{e}"
    );
    let e =
        error("[acceptors]\nstomp = \"127.0.0.1:9000\"\n[websocket]\nbind = \"127.0.0.1:9000\"\n");
    assert!(e.contains("websocket.bind"), "{e}");
    assert!(error("[websocket]\nbind = \"nowhere\"\n").contains("websocket.bind"));
}

#[test]
fn the_websocket_flag_sets_or_turns_off_the_listener() {
    let mut c = load("");
    c.set_websocket_addr(Some("127.0.0.1:2".parse().unwrap()));
    assert_eq!(c.websocket().unwrap().bind.port(), 2);
    c.set_websocket_addr(None);
    assert!(c.websocket().is_none());
}
