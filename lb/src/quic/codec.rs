//! The QUIC-LB connection-ID encodings (draft-ietf-quic-load-balancers, "Server ID
//! Encoding in Connection IDs"): plaintext, single-pass AES-128-ECB (server ID + nonce of
//! exactly 16 octets) and the four-pass Feistel network over AES-128-ECB (any other length).
//!
//! ```text
//! QUIC-LB Connection ID {
//!     First Octet (8),            config rotation (3), length or random bits (5)
//!     Plaintext Block (40..152),  Server ID (8..), Nonce (32..), encrypted with a key
//! }
//! ```
//!
//! The load balancer only decodes ([`Codec::server_id`], no allocation: a few stack blocks);
//! [`Codec::encode`] is the servers' half, kept here for the test vectors, the property
//! tests and the test servers.

use aes::Aes128;
use aes::cipher::generic_array::GenericArray;
use aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use config::ServerId;
use config::quic::{Encoding, QuicLb};

/// The longest plaintext block (server ID + nonce).
const MAX_BLOCK: usize = 19;
/// Half of it, rounded up.
const MAX_HALF: usize = 10;

/// One VIP's encoding with its key schedule expanded.
#[derive(Clone)]
pub struct Codec {
    /// Config rotation codepoint (0..=6).
    pub config_id: u8,
    sid_len: usize,
    nonce_len: usize,
    cipher: Option<Aes128>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("Codec")
            .field("config_id", &self.config_id)
            .field("sid_len", &self.sid_len)
            .field("nonce_len", &self.nonce_len)
            .field("encrypted", &self.cipher.is_some())
            .finish()
    }
}

/// Why a connection ID yields no server ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undecodable {
    /// Shorter than the first octet, server ID and nonce.
    TooShort,
    /// Its config rotation bits name another configuration (or 0b111, none).
    UnknownConfig,
}

impl Codec {
    /// The codec of a validated `quic_lb`.
    pub fn new(q: &QuicLb) -> Codec {
        Codec {
            config_id: q.config_id,
            sid_len: usize::from(q.server_id_len),
            nonce_len: usize::from(q.nonce_len),
            cipher: q.key.map(|k| Aes128::new(&GenericArray::from(k))),
        }
    }

    /// Octets a connection ID needs for its server ID to be read (first octet included).
    pub fn cid_len(&self) -> usize {
        1 + self.sid_len + self.nonce_len
    }

    fn encoding(&self) -> Encoding {
        match &self.cipher {
            None => Encoding::Plaintext,
            Some(_) if self.sid_len + self.nonce_len == 16 => Encoding::SinglePass,
            Some(_) => Encoding::FourPass,
        }
    }

    /// The server ID in `cid` (its first octet included).
    pub fn server_id(&self, cid: &[u8]) -> Result<ServerId, Undecodable> {
        let n = self.sid_len + self.nonce_len;
        let (&first, rest) = cid.split_first().ok_or(Undecodable::TooShort)?;
        if first >> 5 != self.config_id {
            return Err(Undecodable::UnknownConfig);
        }
        let block = rest.get(..n).ok_or(Undecodable::TooShort)?;
        let mut plain = [0u8; MAX_BLOCK];
        match (&self.cipher, self.encoding()) {
            (Some(c), Encoding::SinglePass) => {
                let mut b = GenericArray::clone_from_slice(block);
                c.decrypt_block(&mut b);
                plain[..16].copy_from_slice(&b);
            }
            (Some(c), Encoding::FourPass) => {
                four_pass_decrypt(c, block, self.sid_len, &mut plain[..n]);
            }
            _ => plain[..self.sid_len].copy_from_slice(&block[..self.sid_len]),
        }
        ServerId::new(&plain[..self.sid_len]).ok_or(Undecodable::TooShort)
    }

    /// A connection ID for `sid` and `nonce` (their configured lengths), its first octet
    /// the config rotation bits and the self-described length.
    pub fn encode(&self, sid: &[u8], nonce: &[u8]) -> Vec<u8> {
        assert_eq!(sid.len(), self.sid_len, "server ID length");
        assert_eq!(nonce.len(), self.nonce_len, "nonce length");
        let n = self.sid_len + self.nonce_len;
        let mut out = vec![0u8; 1 + n];
        out[0] = (self.config_id << 5) | (n as u8 & 0x1f);
        out[1..1 + sid.len()].copy_from_slice(sid);
        out[1 + sid.len()..].copy_from_slice(nonce);
        match (&self.cipher, self.encoding()) {
            (Some(c), Encoding::SinglePass) => {
                let mut b = GenericArray::clone_from_slice(&out[1..]);
                c.encrypt_block(&mut b);
                out[1..].copy_from_slice(&b);
            }
            (Some(c), Encoding::FourPass) => {
                let plain: Vec<u8> = out[1..].to_vec();
                four_pass_encrypt(c, &plain, &mut out[1..]);
            }
            _ => {}
        }
        out
    }
}

/// `truncate(AES_ECB(key, expand(len, pass, input)), half)` XORed into `into`.
fn round(c: &Aes128, len: usize, pass: u8, input: &[u8], into: &mut [u8]) {
    let mut b = GenericArray::from([0u8; 16]);
    b[..input.len()].copy_from_slice(input);
    b[14] = len as u8;
    b[15] = pass;
    c.encrypt_block(&mut b);
    for (x, k) in into.iter_mut().zip(b.iter()) {
        *x ^= k;
    }
}

/// The halves of a block of `n` octets: with `n` odd the middle octet is split, the left
/// keeping its high nibble and the right its low one.
fn split(block: &[u8]) -> ([u8; MAX_HALF], [u8; MAX_HALF], usize) {
    let n = block.len();
    let half = n.div_ceil(2);
    let (mut l, mut r) = ([0u8; MAX_HALF], [0u8; MAX_HALF]);
    l[..half].copy_from_slice(&block[..half]);
    r[..half].copy_from_slice(&block[n - half..]);
    if n % 2 == 1 {
        l[half - 1] &= 0xf0;
        r[0] &= 0x0f;
    }
    (l, r, half)
}

/// The halves joined back into `n` octets (the inverse of [`split`]).
fn join(l: &[u8], r: &[u8], out: &mut [u8]) {
    let n = out.len();
    let half = n.div_ceil(2);
    out[..half].copy_from_slice(&l[..half]);
    if n % 2 == 1 {
        out[half - 1] |= r[0];
        out[half..].copy_from_slice(&r[1..half]);
    } else {
        out[half..].copy_from_slice(&r[..half]);
    }
}

/// Clears what the odd length gives the other half: the left's low nibble, the right's high.
fn clear(odd: bool, l: Option<&mut [u8]>, r: Option<&mut [u8]>, half: usize) {
    if !odd {
        return;
    }
    if let Some(l) = l {
        l[half - 1] &= 0xf0;
    }
    if let Some(r) = r {
        r[0] &= 0x0f;
    }
}

fn four_pass_encrypt(c: &Aes128, plain: &[u8], out: &mut [u8]) {
    let n = plain.len();
    let odd = n % 2 == 1;
    let (mut l, mut r, h) = split(plain);
    round(c, n, 1, &l[..h], &mut r[..h]);
    clear(odd, None, Some(&mut r), h);
    round(c, n, 2, &r[..h], &mut l[..h]);
    clear(odd, Some(&mut l), None, h);
    round(c, n, 3, &l[..h], &mut r[..h]);
    clear(odd, None, Some(&mut r), h);
    round(c, n, 4, &r[..h], &mut l[..h]);
    clear(odd, Some(&mut l), None, h);
    join(&l, &r, out);
}

/// Decrypts enough of `block` for a server ID of `sid_len` octets into `out`: three passes
/// when the server ID lies in the left half, four otherwise.
fn four_pass_decrypt(c: &Aes128, block: &[u8], sid_len: usize, out: &mut [u8]) {
    let n = block.len();
    let odd = n % 2 == 1;
    let (mut l, mut r, h) = split(block);
    round(c, n, 4, &r[..h], &mut l[..h]);
    clear(odd, Some(&mut l), None, h);
    round(c, n, 3, &l[..h], &mut r[..h]);
    clear(odd, None, Some(&mut r), h);
    round(c, n, 2, &r[..h], &mut l[..h]);
    clear(odd, Some(&mut l), None, h);
    if sid_len > n / 2 {
        round(c, n, 1, &l[..h], &mut r[..h]);
        clear(odd, None, Some(&mut r), h);
    }
    join(&l, &r, out);
}
