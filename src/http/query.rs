//! Query strings of API requests: `key=value` pairs, percent-decoded, each known key at
//! most once, anything else refused (a typo must not pass for "no filter").

use super::error::ApiError;

/// The query parameters of a request, each known key at most once; anything else is
/// refused, so a typo does not pass for "no filter".
pub(super) fn pairs(raw: Option<&str>, known: &[&str]) -> Result<Vec<(String, String)>, ApiError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if !known.contains(&key) {
            return Err(ApiError::BadRequest(format!(
                "unknown query parameter '{key}' (known: {})",
                known.join(", ")
            )));
        }
        if out.iter().any(|(k, _)| k == key) {
            return Err(ApiError::BadRequest(format!("'{key}' given twice")));
        }
        let value = percent_decode(value).ok_or_else(|| {
            ApiError::BadRequest(format!("{key}: not valid percent-encoded UTF-8"))
        })?;
        out.push((key.to_owned(), value));
    }
    Ok(out)
}

pub(super) fn number(key: &str, value: &str, min: usize, max: usize) -> Result<usize, ApiError> {
    match value.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ if max == usize::MAX => Err(ApiError::BadRequest(format!(
            "{key}: '{value}' is not a whole number of at least {min}"
        ))),
        _ => Err(ApiError::BadRequest(format!(
            "{key}: '{value}' is not a whole number from {min} to {max}"
        ))),
    }
}

/// `%XX` escapes and `+` for space, as browsers and curl encode a query.
pub(super) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}
