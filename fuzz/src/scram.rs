//! The client side of SCRAM (RFC 5802), enough for the harness to log in for real: the
//! fuzzer cannot guess an HMAC, so without this no SCRAM input would get past SASL.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256, Sha512};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Clone, Copy, Debug)]
pub enum Hash {
    Sha256,
    Sha512,
}

/// What the server-first message says.
pub struct ServerFirst {
    pub nonce: String,
    pub salt: Vec<u8>,
    pub iterations: u32,
    /// The message as sent (part of the AuthMessage).
    pub text: String,
}

/// Finds a server-first message (`r=…,s=…,i=…`) in what the broker said.
pub fn find_server_first(heard: &[u8]) -> Option<ServerFirst> {
    let at = heard.windows(2).position(|w| w == b"r=")?;
    let rest = &heard[at..];
    let end = rest
        .iter()
        .position(|b| !(b.is_ascii_graphic()))
        .unwrap_or(rest.len());
    let text = std::str::from_utf8(&rest[..end]).ok()?;
    let mut attrs = text.split(',');
    let nonce = attrs.next()?.strip_prefix("r=")?;
    let salt_text = attrs.next()?.strip_prefix("s=")?;
    let salt = BASE64.decode(salt_text).ok()?;
    let iterations_text = attrs.next()?.strip_prefix("i=")?;
    // The attribute runs to the end of the frame; only its digits count.
    let digits: String = iterations_text
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let iterations = digits.parse().ok()?;
    let text = format!("r={nonce},s={salt_text},i={digits}");
    Some(ServerFirst {
        nonce: nonce.to_owned(),
        salt,
        iterations,
        text,
    })
}

/// The client-final message without its proof, and with the proof that `password` gives.
/// `client_first_bare` is what the client sent after its GS2 header.
pub fn client_final(
    hash: Hash,
    password: &str,
    client_first_bare: &str,
    server: &ServerFirst,
) -> String {
    let without_proof = format!("c=biws,r={}", server.nonce);
    let auth_message = format!("{client_first_bare},{},{without_proof}", server.text);
    let proof = proof(hash, password, server, &auth_message);
    format!("{without_proof},p={}", BASE64.encode(proof))
}

fn proof(hash: Hash, password: &str, server: &ServerFirst, auth_message: &str) -> Vec<u8> {
    let salted = salted_password(hash, password, &server.salt, server.iterations);
    let client_key = match hash {
        Hash::Sha256 => hmac::<Hmac<Sha256>>(&salted, b"Client Key"),
        Hash::Sha512 => hmac::<Hmac<Sha512>>(&salted, b"Client Key"),
    };
    let signature = match hash {
        Hash::Sha256 => hmac::<Hmac<Sha256>>(&Sha256::digest(&client_key), auth_message.as_bytes()),
        Hash::Sha512 => hmac::<Hmac<Sha512>>(&Sha512::digest(&client_key), auth_message.as_bytes()),
    };
    client_key
        .iter()
        .zip(signature)
        .map(|(k, s)| k ^ s)
        .collect()
}

/// PBKDF2 is most of a login's cost and the broker's salts do not change: each password is
/// salted once per process.
fn salted_password(hash: Hash, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
    type Key = (bool, String, Vec<u8>, u32);
    static CACHE: Mutex<Option<HashMap<Key, Vec<u8>>>> = Mutex::new(None);
    let sha512 = matches!(hash, Hash::Sha512);
    let key = (sha512, password.to_owned(), salt.to_vec(), iterations);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(salted) = cache.get(&key) {
        return salted.clone();
    }
    // The iteration count comes from the broker's own credentials; capped all the same.
    let iterations = iterations.min(100_000);
    let salted = if sha512 {
        let mut out = vec![0u8; 64];
        pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, iterations, &mut out);
        out
    } else {
        let mut out = vec![0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
        out
    };
    // Unknown users get a salt of their own per name: keep the cache bounded.
    if cache.len() < 4096 {
        cache.insert(key, salted.clone());
    }
    salted
}

fn hmac<M: Mac + KeyInit>(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = <M as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}
