//! The session key and the challenge-response that every link runs before carrying frames:
//! both ends prove they hold the key with HMAC-SHA256 over fresh nonces, never sending it.
//!
//! Connector → acceptor: `sdm-hello TO FROM NONCE_C`; acceptor → connector:
//! `sdm-welcome TO NONCE_S MAC_A`; connector → acceptor: `sdm-proof MAC_C`; acceptor →
//! connector: `sdm-ready`. An acceptor that is not `TO` answers `sdm-refuse ME` instead.

use std::fmt;

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

/// Environment variable that hands the session key to daemons (never the command line).
pub const SESSION_KEY_ENV: &str = "SDM_SESSION_KEY";

/// A random 256-bit session key.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKey([u8; 32]);

/// Why a session key could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The variable is not set.
    #[error(
        "{SESSION_KEY_ENV} is not set: daemons get the session key from the front-end's environment"
    )]
    Missing,
    /// The text is not 64 hex digits.
    #[error("session key must be 64 hex digits, got {0} characters")]
    Malformed(usize),
}

impl SessionKey {
    /// A fresh key from the system's secure random source.
    pub fn generate() -> Self {
        let mut k = [0u8; 32];
        SystemRandom::new()
            .fill(&mut k)
            .expect("the system random source works");
        Self(k)
    }

    /// Parses 64 hex digits.
    pub fn from_hex(s: &str) -> Result<Self, KeyError> {
        let s = s.trim();
        let b = hex_decode(s).ok_or(KeyError::Malformed(s.len()))?;
        let k: [u8; 32] = b.try_into().map_err(|_| KeyError::Malformed(s.len()))?;
        Ok(Self(k))
    }

    /// Reads the key from [`SESSION_KEY_ENV`].
    pub fn from_env() -> Result<Self, KeyError> {
        let v = std::env::var(SESSION_KEY_ENV).map_err(|_| KeyError::Missing)?;
        Self::from_hex(&v)
    }

    /// 64 hex digits (for the environment of daemons).
    pub fn to_hex(&self) -> String {
        hex_encode(&self.0)
    }

    fn key(&self) -> hmac::Key {
        hmac::Key::new(hmac::HMAC_SHA256, &self.0)
    }

    fn mac(&self, parts: &[&str]) -> String {
        hex_encode(hmac::sign(&self.key(), &mac_input(parts)).as_ref())
    }

    fn verify(&self, parts: &[&str], mac_hex: &str) -> bool {
        hex_decode(mac_hex)
            .is_some_and(|tag| hmac::verify(&self.key(), &mac_input(parts), &tag).is_ok())
    }

    /// The acceptor's MAC over the hello and its own nonce.
    pub(crate) fn acceptor_mac(&self, to: &str, from: &str, nc: &str, ns: &str) -> String {
        self.mac(&["acceptor", to, from, nc, ns])
    }

    /// Checks the acceptor's MAC (constant time).
    pub(crate) fn check_acceptor(
        &self,
        to: &str,
        from: &str,
        nc: &str,
        ns: &str,
        mac: &str,
    ) -> bool {
        self.verify(&["acceptor", to, from, nc, ns], mac)
    }

    /// The connector's MAC over both nonces.
    pub(crate) fn connector_mac(&self, to: &str, from: &str, nc: &str, ns: &str) -> String {
        self.mac(&["connector", to, from, ns, nc])
    }

    /// Checks the connector's MAC (constant time).
    pub(crate) fn check_connector(
        &self,
        to: &str,
        from: &str,
        nc: &str,
        ns: &str,
        mac: &str,
    ) -> bool {
        self.verify(&["connector", to, from, ns, nc], mac)
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(..)")
    }
}

/// A fresh 128-bit nonce in hex.
pub(crate) fn nonce() -> String {
    let mut n = [0u8; 16];
    SystemRandom::new()
        .fill(&mut n)
        .expect("the system random source works");
    hex_encode(&n)
}

/// What a MAC covers: the parts, each followed by a NUL so no two lists collide.
fn mac_input(parts: &[&str]) -> Vec<u8> {
    let mut msg = Vec::new();
    for p in parts {
        msg.extend_from_slice(p.as_bytes());
        msg.push(0);
    }
    msg
}

/// Bytes as lowercase hex digits (keys, nonces, MACs, fingerprints, one-line PEM).
pub fn hex_encode(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * b.len());
    for &x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

/// The bytes of an even-length string of hex digits; `None` for anything else.
pub fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_errors() {
        let k = SessionKey::generate();
        assert_eq!(SessionKey::from_hex(&k.to_hex()).unwrap(), k);
        assert!(matches!(
            SessionKey::from_hex("abc"),
            Err(KeyError::Malformed(3))
        ));
        assert!(SessionKey::from_hex(&"zz".repeat(32)).is_err());
        assert_eq!(format!("{k:?}"), "SessionKey(..)");
        let all: Vec<u8> = (0..=255).collect();
        let text = hex_encode(&all);
        let want: String = all.iter().map(|x| format!("{x:02x}")).collect();
        assert_eq!(text, want);
        assert_eq!(hex_decode(&text).unwrap(), all);
    }

    #[test]
    fn macs_bind_key_names_and_nonces() {
        let (k, other) = (SessionKey::generate(), SessionKey::generate());
        let (nc, ns) = (nonce(), nonce());
        let m = k.acceptor_mac("3", "1", &nc, &ns);
        assert!(k.check_acceptor("3", "1", &nc, &ns, &m));
        assert!(!other.check_acceptor("3", "1", &nc, &ns, &m));
        assert!(!k.check_acceptor("4", "1", &nc, &ns, &m));
        assert!(!k.check_acceptor("3", "1", &nonce(), &ns, &m));
        let c = k.connector_mac("3", "1", &nc, &ns);
        assert!(k.check_connector("3", "1", &nc, &ns, &c));
        assert!(
            !k.check_acceptor("3", "1", &nc, &ns, &c),
            "roles are not interchangeable"
        );
        assert!(!k.check_connector("3", "1", &nc, &ns, "nothex"));
    }
}
