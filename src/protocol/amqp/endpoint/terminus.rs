//! What a link's source or target names in the core's terms: queue or topic, selector,
//! browse, subscription names. Qpid JMS tells a queue from a topic by terminus capabilities
//! (or, on the anonymous relay, by the `x-opt-jms-dest` annotation); other clients may use
//! `queue://` / `topic://` prefixes.

use crate::core::selector::{Selector, SelectorError};
use crate::core::RoutingType;
use crate::protocol::amqp::wire::definitions::{ExpiryPolicy, Source, TerminusDurability};
use crate::protocol::amqp::wire::types::{Descriptor, Map, Symbol, Value};
use std::sync::Arc;

pub const CAP_TOPIC: &str = "topic";
pub const CAP_TEMP_TOPIC: &str = "temporary-topic";
pub const CAP_SHARED: &str = "shared";
pub const CAP_GLOBAL: &str = "global";
const SELECTOR_DESCRIPTOR: &str = "apache.org:selector-filter:string";
const SELECTOR_CODE: u64 = 0x0000_468C_0000_0004;

/// An address resolved to the core's name and routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: Arc<str>,
    pub routing: RoutingType,
}

fn has(caps: &[Symbol], cap: &str) -> bool {
    caps.iter().any(|c| c.as_str() == cap)
}

/// Resolves an address with the terminus capabilities.
pub fn resolve(address: &str, capabilities: &[Symbol]) -> Node {
    let (name, routing) = if let Some(rest) = address.strip_prefix("topic://") {
        (rest, RoutingType::Multicast)
    } else if let Some(rest) = address.strip_prefix("queue://") {
        (rest, RoutingType::Anycast)
    } else if has(capabilities, CAP_TOPIC) || has(capabilities, CAP_TEMP_TOPIC) {
        (address, RoutingType::Multicast)
    } else {
        (address, RoutingType::Anycast)
    };
    Node {
        name: Arc::from(name),
        routing,
    }
}

/// The anonymous relay: a message's `to` and its `x-opt-jms-dest` type (1 topic, 3 temp topic).
pub fn resolve_relay(to: &str, jms_dest: Option<&Value>) -> Node {
    let topic = matches!(
        jms_dest,
        Some(Value::Byte(1 | 3)) | Some(Value::Ubyte(1 | 3))
    );
    if topic && !to.starts_with("queue://") && !to.starts_with("topic://") {
        return Node {
            name: Arc::from(to),
            routing: RoutingType::Multicast,
        };
    }
    resolve(to, &[])
}

/// The JMS selector in a source's filter set, if any.
pub fn selector(filter: Option<&Map>) -> Result<Option<Selector>, SelectorError> {
    let Some(filter) = filter else {
        return Ok(None);
    };
    for (_, v) in filter {
        let Value::Described(d) = v else { continue };
        let is_selector = match &d.descriptor {
            Descriptor::Name(n) => n.as_str() == SELECTOR_DESCRIPTOR,
            Descriptor::Code(c) => *c == SELECTOR_CODE,
        };
        if let (true, Value::String(text)) = (is_selector, &d.value) {
            return Selector::parse_optional(text.as_str());
        }
    }
    Ok(None)
}

/// A copy (browsing) receiver: the Qpid JMS QueueBrowser.
pub fn is_browse(source: &Source) -> bool {
    source
        .distribution_mode
        .as_ref()
        .is_some_and(|m| m.as_str() == "copy")
}

/// How a topic receiver subscribes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionKind {
    /// A private queue for this link only.
    Plain,
    /// A named subscription (JMS durable or shared consumer).
    Named { name: String, durable: bool },
}

/// A durable subscription is asked for with a durable terminus that never expires; a shared
/// one with the `shared` capability. Names follow Qpid JMS: the link name is the subscription
/// name, shared links get `|suffix` tails (`sub|2`, `sub|global`, `sub|volatile1`), and
/// subscriptions without the `global` capability belong to the connection's client id.
pub fn subscription_kind(source: &Source, link_name: &str, container_id: &str) -> SubscriptionKind {
    let durable =
        source.durable != TerminusDurability::None && source.expiry_policy == ExpiryPolicy::Never;
    let shared = has(&source.capabilities, CAP_SHARED);
    if !durable && !shared {
        return SubscriptionKind::Plain;
    }
    SubscriptionKind::Named {
        name: subscription_name(
            link_name,
            container_id,
            shared,
            has(&source.capabilities, CAP_GLOBAL),
        ),
        durable,
    }
}

pub fn subscription_name(
    link_name: &str,
    container_id: &str,
    shared: bool,
    global: bool,
) -> String {
    let base = if shared {
        link_name.split('|').next().unwrap_or(link_name)
    } else {
        link_name
    };
    if global {
        base.to_owned()
    } else {
        format!("{container_id}:{base}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::amqp::wire::types::Described;

    #[test]
    fn capabilities_and_prefixes() {
        assert_eq!(resolve("a", &[]).routing, RoutingType::Anycast);
        assert_eq!(
            resolve("a", &[Symbol::from("topic")]).routing,
            RoutingType::Multicast
        );
        let n = resolve("topic://t", &[]);
        assert_eq!((&*n.name, n.routing), ("t", RoutingType::Multicast));
        assert_eq!(
            resolve_relay("x", Some(&Value::Byte(1))).routing,
            RoutingType::Multicast
        );
        assert_eq!(
            resolve_relay("x", Some(&Value::Byte(0))).routing,
            RoutingType::Anycast
        );
    }

    #[test]
    fn finds_the_selector() {
        let filter = vec![(
            Value::symbol("jms-selector"),
            Value::Described(Box::new(Described {
                descriptor: Descriptor::Name(Symbol::from(SELECTOR_DESCRIPTOR)),
                value: Value::string("color = 'red'"),
            })),
        )];
        assert!(selector(Some(&filter)).unwrap().is_some());
        let bad = vec![(
            Value::symbol("jms-selector"),
            Value::Described(Box::new(Described {
                descriptor: Descriptor::Code(SELECTOR_CODE),
                value: Value::string("color = "),
            })),
        )];
        assert!(selector(Some(&bad)).is_err());
    }

    #[test]
    fn subscription_names_follow_qpid_jms() {
        assert_eq!(subscription_name("sub", "c1", false, false), "c1:sub");
        assert_eq!(subscription_name("sub|2", "c1", true, false), "c1:sub");
        assert_eq!(subscription_name("sub|global", "c1", true, true), "sub");
        let durable = Source {
            durable: TerminusDurability::UnsettledState,
            expiry_policy: ExpiryPolicy::Never,
            ..Source::default()
        };
        assert_eq!(
            subscription_kind(&durable, "s", "c"),
            SubscriptionKind::Named {
                name: "c:s".into(),
                durable: true
            }
        );
        assert_eq!(
            subscription_kind(&Source::default(), "s", "c"),
            SubscriptionKind::Plain
        );
    }
}
