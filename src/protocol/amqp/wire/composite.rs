//! `composite!`: a composite type's `Composite` impl from its field list.

#[cfg(test)]
mod tests;
