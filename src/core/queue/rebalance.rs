//! `group_rebalance`: when a consumer joins, every group binding is released
//! so groups spread over all consumers again (Artemis `group-rebalance`). With
//! `group_rebalance_pause_dispatch` a group whose old owner still holds some of
//! its messages waits until they are settled, so two consumers never hold the
//! same group at once; only that group waits.

use super::{InFlight, Queue, State, PAUSED};
use crate::core::consumer::ConsumerId;
use crate::core::fast_map::FastMap;
use std::sync::Arc;

impl Queue {
    pub(super) fn rebalance(&self, st: &mut State) {
        let pause = st.settings.group_rebalance_pause_dispatch;
        let mut busy: FastMap<Arc<str>, u32> = FastMap::default();
        if pause {
            for flight in st.in_flight.values() {
                if let Some(lane) = &flight.entry.lane {
                    *busy.entry(lane.clone()).or_default() += 1;
                }
            }
        }
        for (lane, owner) in st.groups.bindings() {
            if owner == PAUSED {
                continue;
            }
            match busy.remove(&lane) {
                Some(count) => {
                    st.set_owner(&lane, Some(PAUSED));
                    st.paused_in_flight.insert(lane, count);
                }
                None => st.set_owner(&lane, None),
            }
        }
    }
}

impl State {
    /// Takes a group from `consumer` (it cannot take the group's messages,
    /// AMQP undeliverable-here). While it still holds older messages of the
    /// group the group is paused, as a rebalance pauses it, so nobody gets a
    /// newer message before those are settled and back in their place.
    /// Like a rebalance's pause, it waits for every message of the lane in
    /// flight (a group closed by JMSXGroupSeq -1 and bound again may have
    /// some with another consumer), since each settlement counts down.
    pub(super) fn move_group_from(&mut self, lane: &Arc<str>, consumer: ConsumerId) {
        let of_lane = |f: &&InFlight| f.entry.lane.as_ref() == Some(lane);
        let holds_more = self
            .in_flight
            .values()
            .filter(of_lane)
            .any(|f| f.consumer == consumer);
        if !holds_more {
            self.set_owner(lane, None);
            return;
        }
        let outstanding = self.in_flight.values().filter(of_lane).count() as u32;
        self.set_owner(lane, Some(PAUSED));
        self.paused_in_flight.insert(lane.clone(), outstanding);
    }

    /// Frees a paused group whose last delivery in flight this was.
    pub(super) fn note_taken(&mut self, flight: InFlight) -> InFlight {
        if let Some(slot) = self.consumers.get_at_mut(flight.index, flight.consumer) {
            let bytes = flight.entry.charge.bytes();
            debug_assert!(slot.in_flight_bytes >= bytes);
            slot.in_flight_bytes = slot.in_flight_bytes.saturating_sub(bytes);
        }
        if self.paused_in_flight.is_empty() {
            return flight;
        }
        if let Some(lane) = &flight.entry.lane {
            let left = match self.paused_in_flight.get_mut(lane) {
                Some(count) => {
                    *count = count.saturating_sub(1);
                    *count
                }
                None => return flight,
            };
            if left == 0 {
                self.paused_in_flight.remove(lane);
                if self.groups.owner(lane) == Some(PAUSED) {
                    self.set_owner(lane, None);
                }
            }
        }
        flight
    }
}
