//! Attaching links: turning a source (the peer receives) or a target (the peer sends) into a
//! core subscription or a route, and answering. A refused attach is answered the spec's way:
//! an attach with a null terminus, then a detach carrying the error.

use super::condition::core_condition;
use super::env::Env;
use super::link::{ReceiverLink, Route, SenderLink};
use super::terminus::{self, Node, SubscriptionKind, CAP_TEMP_TOPIC};
use crate::core::consumer::{ConsumerOptions, CreditMode, MessageFilter};
use crate::core::security::Permission;
use crate::core::{CoreError, RoutingType};
use crate::protocol::amqp::wire::definitions::{
    AmqpError, ReceiverSettleMode, Role, SenderSettleMode, Source, Target,
};
use crate::protocol::amqp::wire::error::condition;
use crate::protocol::amqp::wire::performatives::Attach;
use crate::protocol::amqp::wire::types::{Str, Symbol, Value};
use crate::protocol::amqp::wire::{ExpiryPolicy, TargetKind, TerminusDurability};
use std::sync::Arc;

/// The attach that answers a refused one (`role` is ours): the peer's terminus
/// on its side, a null one on ours. The detach with the error follows it.
pub fn refusal(a: &Attach, role: Role, error: &AmqpError) -> Attach {
    tracing::debug!(
        link = a.name.as_str(),
        condition = error.condition.as_str(),
        "attach refused"
    );
    let mut reply = Attach::new(a.name.as_str(), a.handle, role);
    match role {
        Role::Sender => reply.target = a.target.clone(),
        Role::Receiver => reply.source = a.source.clone(),
    }
    reply
}

fn error(condition: &str, description: impl AsRef<str>) -> AmqpError {
    AmqpError::new(condition, Some(description.as_ref()))
}

fn core_error(e: &CoreError) -> AmqpError {
    error(core_condition(e), e.to_string())
}

/// The peer receives: the broker sends from a queue or a topic subscription.
/// The link and our attach in answer, or why it is refused.
pub fn sender(env: &Env, a: &Attach) -> Result<(SenderLink, Attach), AmqpError> {
    let (link, source) = subscribe(env, a)?;
    let mut reply = Attach::new(a.name.as_str(), a.handle, Role::Sender);
    reply.snd_settle_mode = if link.presettled {
        SenderSettleMode::Settled
    } else {
        a.snd_settle_mode
    };
    reply.rcv_settle_mode = ReceiverSettleMode::First;
    reply.source = Some(source);
    reply.target = a.target.clone();
    reply.initial_delivery_count = Some(0);
    Ok((link, reply))
}

fn consumer_options(a: &Attach, source: &Source) -> Result<ConsumerOptions, AmqpError> {
    let filter = terminus::selector(source.filter.as_ref())
        .map_err(|e| error(condition::INVALID_FIELD, e.to_string()))?
        .map(|sel| Arc::new(sel) as Arc<dyn MessageFilter>);
    let priority = a
        .properties
        .as_ref()
        .and_then(|p| {
            p.iter()
                .find(|(k, _)| matches!(k, Value::Symbol(s) if s.as_str() == "priority"))
        })
        .and_then(|(_, v)| match v {
            Value::Int(n) => Some(*n),
            Value::Uint(n) => i32::try_from(*n).ok(),
            Value::Ubyte(n) => Some(i32::from(*n)),
            Value::Long(n) => i32::try_from(*n).ok(),
            _ => None,
        })
        .unwrap_or(0);
    Ok(ConsumerOptions {
        credit: CreditMode::Explicit,
        priority,
        filter,
        browse: terminus::is_browse(source),
    })
}

fn subscribe(env: &Env, a: &Attach) -> Result<(SenderLink, Source), AmqpError> {
    let name = a.name.as_str().to_owned();
    let Some(source) = a.source.clone() else {
        return reattach_durable(env, a);
    };
    let mut options = consumer_options(a, &source)?;
    if !source.dynamic {
        if let Some(address) = source.address.as_ref() {
            let node = terminus::resolve(address.as_str(), &source.capabilities);
            // Qpid JMS asks for distribution-mode copy on every topic
            // subscription; only on a queue does copy mean browse.
            if node.routing == RoutingType::Multicast {
                options.browse = false;
            }
        }
    }
    let browse = options.browse;
    let presettled = a.snd_settle_mode == SenderSettleMode::Settled || browse;
    let sink = env.sink.clone();
    let who = &env.principal;
    if source.dynamic {
        let temp = env
            .broker
            .create_temporary_queue_as(who)
            .map_err(|e| core_error(&e))?;
        // Its creator reads it without further permission.
        let sub = env
            .broker
            .subscribe(temp.name(), RoutingType::Anycast, options, sink)
            .map_err(|e| core_error(&e))?;
        let mut reply = source;
        reply.address = Some(Str::from(&**temp.name()));
        let mut link = SenderLink::new(sub, presettled, browse);
        link.temporary = Some(temp);
        return Ok((link, reply));
    }
    let Some(address) = source.address.as_ref() else {
        return Err(error(condition::INVALID_FIELD, "source has no address"));
    };
    let Node {
        name: node,
        routing,
    } = terminus::resolve(address.as_str(), &source.capabilities);
    let mut durable = None;
    let sub = match routing {
        RoutingType::Anycast => env.broker.subscribe_as(&node, routing, options, sink, who),
        RoutingType::Multicast => {
            match terminus::subscription_kind(&source, &name, &env.container_id) {
                SubscriptionKind::Plain => {
                    env.broker.subscribe_as(&node, routing, options, sink, who)
                }
                SubscriptionKind::Named {
                    name: sub_name,
                    durable: is_durable,
                } => {
                    if is_durable {
                        durable = Some((node.clone(), sub_name.clone()));
                    }
                    env.broker
                        .subscribe_named_as(&node, &sub_name, is_durable, options, sink, who)
                }
            }
        }
    }
    .map_err(|e| core_error(&e))?;
    let mut link = SenderLink::new(sub, presettled, browse);
    link.durable = durable;
    Ok((link, source))
}

/// Qpid JMS unsubscribes by attaching to the subscription's link name with no source (the
/// broker answers with the source it has, if any) and detaching with `closed`.
fn reattach_durable(env: &Env, a: &Attach) -> Result<(SenderLink, Source), AmqpError> {
    let link_name = a.name.as_str();
    let global = a
        .desired_capabilities
        .iter()
        .any(|c| c.as_str() == terminus::CAP_GLOBAL);
    let candidates = [
        terminus::subscription_name(link_name, &env.container_id, false, false),
        terminus::subscription_name(link_name, &env.container_id, true, global),
        terminus::subscription_name(link_name, &env.container_id, true, true),
    ];
    let names = env.broker.queue_names();
    for sub_name in candidates {
        let suffix = format!("::durable::{sub_name}");
        let Some(topic) = names
            .iter()
            .find_map(|q| q.strip_suffix(suffix.as_str()).map(str::to_owned))
        else {
            continue;
        };
        let options = ConsumerOptions {
            credit: CreditMode::Explicit,
            ..ConsumerOptions::default()
        };
        let sub = env
            .broker
            .subscribe_named_as(
                &topic,
                &sub_name,
                true,
                options,
                env.sink.clone(),
                &env.principal,
            )
            .map_err(|e| core_error(&e))?;
        let source = Source {
            address: Some(Str::from(topic.as_str())),
            durable: TerminusDurability::UnsettledState,
            expiry_policy: ExpiryPolicy::Never,
            capabilities: vec![Symbol::from_static(terminus::CAP_TOPIC)],
            ..Source::default()
        };
        let mut link = SenderLink::new(sub, false, false);
        link.durable = Some((Arc::from(topic.as_str()), sub_name));
        return Ok((link, source));
    }
    Err(error(condition::NOT_FOUND, "no such durable subscription"))
}

/// The peer sends: to a node, to the anonymous relay, to a dynamic node, or to the
/// transaction coordinator. The link and our attach in answer, or why it is refused.
pub fn receiver(env: &Env, a: &Attach) -> Result<(ReceiverLink, Attach), AmqpError> {
    let (route, target) = route(env, a)?;
    let mut reply = Attach::new(a.name.as_str(), a.handle, Role::Receiver);
    reply.snd_settle_mode = a.snd_settle_mode;
    reply.rcv_settle_mode = ReceiverSettleMode::First;
    reply.source = a.source.clone();
    reply.target = target;
    reply.max_message_size = Some(env.max_message_size);
    let producer = env
        .factory
        .as_ref()
        .map(|f| f.new_producer())
        .unwrap_or_default();
    // A producer attaching to a queue that blocks its producers starts
    // without credit, and gets it when the queue lets producers go.
    let withheld = route.blocking_queue(&env.broker);
    let producing = route.register_producer(&env.broker);
    let link = ReceiverLink {
        _producing: producing,
        route,
        producer,
        credit: if withheld.is_some() {
            0
        } else {
            env.link_credit
        },
        delivery_count: a.initial_delivery_count.unwrap_or(0),
        partial: None,
        withheld,
        relay_allowed: Default::default(),
    };
    Ok((link, reply))
}

fn route(env: &Env, a: &Attach) -> Result<(Route, Option<TargetKind>), AmqpError> {
    let target = match &a.target {
        Some(TargetKind::Coordinator(c)) => {
            return Ok((Route::Coordinator, Some(TargetKind::Coordinator(c.clone()))))
        }
        Some(TargetKind::Target(t)) => t.clone(),
        None => return Ok((Route::Anonymous, None)),
    };
    if target.dynamic {
        let mut reply: Target = target.clone();
        let temp_topic = target
            .capabilities
            .iter()
            .any(|c| c.as_str() == CAP_TEMP_TOPIC);
        let route = if temp_topic {
            let name: Arc<str> =
                Arc::from(format!("temp-topic.{:x}", env.broker.next_consumer_id()));
            // A temporary topic is only an address; its creator may send to it.
            env.principal
                .check(&name, Permission::CreateAddress)
                .map_err(|e| core_error(&e.into()))?;
            reply.address = Some(Str::from(&*name));
            Route::Topic { name }
        } else {
            let temp = env
                .broker
                .create_temporary_queue_as(&env.principal)
                .map_err(|e| core_error(&e))?;
            reply.address = Some(Str::from(&**temp.name()));
            Route::Temporary(temp)
        };
        return Ok((route, Some(TargetKind::Target(reply))));
    }
    let Some(address) = target.address.as_ref() else {
        return Ok((Route::Anonymous, Some(TargetKind::Target(target))));
    };
    let Node { name, routing } = terminus::resolve(address.as_str(), &target.capabilities);
    env.broker
        .may_send(&name, routing, &env.principal)
        .map_err(|e| core_error(&e))?;
    let route = match routing {
        RoutingType::Anycast => {
            let queue = env
                .broker
                .open_queue(&name, &env.principal)
                .map_err(|e| core_error(&e))?;
            Route::Queue { name, queue }
        }
        RoutingType::Multicast => Route::Topic { name },
    };
    Ok((route, Some(TargetKind::Target(target))))
}
