//! Zaqar's limits, at the values of its default configuration.

/// Seconds a message lives when neither it nor its queue says.
pub const DEFAULT_MESSAGE_TTL: u64 = 3600;
pub const MIN_MESSAGE_TTL: u64 = 60;
pub const MAX_MESSAGE_TTL: u64 = 1_209_600;
pub const DEFAULT_CLAIM_TTL: u64 = 300;
pub const DEFAULT_CLAIM_GRACE: u64 = 60;
pub const MIN_CLAIM_TTL: u64 = 60;
/// Zaqar refuses a shorter grace with 400 ("must be at least 60 seconds").
pub const MIN_CLAIM_GRACE: u64 = 60;
pub const MAX_CLAIM_TTL: u64 = 43_200;
pub const MAX_CLAIM_GRACE: u64 = 43_200;
/// Most messages one page, claim or pop may hold.
pub const MAX_MESSAGES_PER_PAGE: u32 = 20;
pub const DEFAULT_MESSAGES_PER_PAGE: u32 = 10;
pub const DEFAULT_MESSAGES_PER_CLAIM: u32 = 10;
pub const MAX_QUEUES_PER_PAGE: usize = 1000;
pub const DEFAULT_QUEUES_PER_PAGE: usize = 10;
/// Bytes a post may carry, unless its queue's `_max_messages_post_size` says less.
pub const MAX_MESSAGES_POST_SIZE: usize = 262_144;
/// Seconds `_default_message_delay` and a message's `delay` may be (Zaqar's
/// `max_message_delay`, 900 by default); a queue's `max_message_delay`
/// setting lowers it.
pub const MAX_MESSAGE_DELAY: u64 = 900;
