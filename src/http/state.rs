//! What the API answers from: the broker once it is recovered, and what the server
//! knows about itself (start time, listeners, readiness).

use crate::core::{Broker, RecoveryStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// One protocol listener, as `/api/broker` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ListenerInfo {
    pub name: String,
    pub protocols: Vec<String>,
    pub address: String,
    pub tls: bool,
}

/// Shared by every request. The HTTP listener starts before recovery (so health checks
/// see the broker start), which is why the broker is filled in later.
pub struct Management {
    started: Instant,
    broker: OnceLock<Broker>,
    listeners: OnceLock<Vec<ListenerInfo>>,
    ready: AtomicBool,
    recovery: Arc<RecoveryStatus>,
}

impl Default for Management {
    fn default() -> Self {
        Management::new(RecoveryStatus::new())
    }
}

impl Management {
    /// Before recovery, which shows its progress in `recovery`.
    pub fn new(recovery: Arc<RecoveryStatus>) -> Self {
        Management {
            started: Instant::now(),
            broker: OnceLock::new(),
            listeners: OnceLock::new(),
            ready: AtomicBool::new(false),
            recovery,
        }
    }

    /// How far the broker's recovery has come (done once the API answers).
    pub fn recovery(&self) -> &RecoveryStatus {
        &self.recovery
    }

    /// Recovery is done and every listener is up: the API answers, and
    /// `/health/ready` says so.
    pub fn set_ready(&self, broker: Broker, listeners: Vec<ListenerInfo>) {
        let _ = self.broker.set(broker);
        let _ = self.listeners.set(listeners);
        self.ready.store(true, Ordering::Release);
    }

    /// The broker is stopping: ready no more (load balancers stop sending).
    pub fn set_stopping(&self) {
        self.ready.store(false, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The broker, once recovered.
    pub fn broker(&self) -> Option<&Broker> {
        self.broker.get()
    }

    pub fn listeners(&self) -> &[ListenerInfo] {
        self.listeners.get().map_or(&[], Vec::as_slice)
    }

    pub fn uptime(&self) -> std::time::Duration {
        self.started.elapsed()
    }
}
