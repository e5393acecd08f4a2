//! Names that recur message after message (property keys, destinations),
//! shared instead of allocated for every message.

use std::sync::Arc;

/// How many distinct names a connection keeps; producers use a handful.
const KEEP: usize = 16;

/// The names one connection saw last. Not a general interner: a name that
/// stops recurring is pushed out by newer ones, so memory stays bounded
/// whatever a client sends.
#[derive(Debug, Default)]
pub struct Names {
    recent: Vec<Arc<str>>,
    /// Where the next new name goes once `recent` is full.
    next: usize,
}

impl Names {
    pub fn get(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.recent.iter().find(|n| ***n == *name) {
            return known.clone();
        }
        let name: Arc<str> = Arc::from(name);
        if self.recent.len() < KEEP {
            self.recent.push(name.clone());
        } else {
            self.recent[self.next] = name.clone();
            self.next = (self.next + 1) % KEEP;
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recurring_name_is_shared() {
        let mut names = Names::default();
        let a = names.get("color");
        let b = names.get("color");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(&*names.get("size"), "size");
    }

    #[test]
    fn memory_stays_bounded_and_old_names_still_resolve() {
        let mut names = Names::default();
        for i in 0..1000 {
            assert_eq!(&*names.get(&format!("n{i}")), format!("n{i}"));
        }
        assert_eq!(names.recent.len(), KEEP);
        assert_eq!(&*names.get("n0"), "n0");
    }
}
