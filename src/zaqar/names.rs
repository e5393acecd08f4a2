//! Zaqar queue names and projects to Weir queue names.
//!
//! A queue in the default project (no `X-Project-Id`, or an empty one) is the
//! Weir queue of the same name, so STOMP `/queue/NAME` and AMQP `NAME` reach
//! it. A queue `NAME` of project `P` is the Weir queue `P/NAME`: Zaqar names
//! never contain `/`, so the two never collide, and a project sees only its
//! own queues.

use super::error::ZaqarError;

/// Validated as Zaqar does: 1 to 64 of `[a-zA-Z0-9_-]`.
pub fn check_queue_name(name: &str) -> Result<(), ZaqarError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match ok {
        true => Ok(()),
        false => Err(ZaqarError::BadRequest(format!(
            "Queue names may not be more than 64 characters long, and may only contain ASCII letters, digits, underscores and dashes; '{name}' is not allowed."
        ))),
    }
}

/// A project id may not contain `/` (it separates project and queue).
pub fn check_project(project: &str) -> Result<(), ZaqarError> {
    let ok = project.len() <= 256 && !project.contains('/') && !project.contains("::");
    match ok && !project.chars().any(char::is_control) {
        true => Ok(()),
        false => Err(ZaqarError::Malformed {
            title: "Malformed header",
            description: "X-Project-Id may not contain '/', '::' or control characters and is at most 256 characters long.".into(),
        }),
    }
}

pub fn weir_name(project: Option<&str>, queue: &str) -> String {
    match project {
        Some(p) => format!("{p}/{queue}"),
        None => queue.to_owned(),
    }
}

/// The Zaqar name of a Weir queue, if it belongs to `project`.
pub fn zaqar_name<'a>(project: Option<&str>, weir: &'a str) -> Option<&'a str> {
    let name = match project {
        Some(p) => weir.strip_prefix(p)?.strip_prefix('/')?,
        None => weir,
    };
    check_queue_name(name).is_ok().then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_namespace_queues_and_the_default_project_is_plain_weir() {
        assert_eq!(weir_name(None, "orders"), "orders");
        assert_eq!(weir_name(Some("p1"), "orders"), "p1/orders");
        assert_eq!(zaqar_name(Some("p1"), "p1/orders"), Some("orders"));
        assert_eq!(zaqar_name(None, "p1/orders"), None);
        assert_eq!(zaqar_name(Some("p1"), "orders"), None);
        assert_eq!(zaqar_name(Some("p1"), "p10/orders"), None);
        assert_eq!(zaqar_name(None, "orders"), Some("orders"));
        assert_eq!(zaqar_name(None, "a.b"), None, "not a Zaqar name");
        assert!(check_queue_name(&"x".repeat(65)).is_err());
        assert!(check_project("a/b").is_err());
    }
}
