//! A reader over the raw configuration tree that records every problem instead of stopping
//! at the first one, so `sluice check` can list all errors of a file, each with its key path.
//!
//! serde's derive stops at the first error and cannot say "unknown key" together with
//! "wrong type" elsewhere; walking the tree by hand gives full, exact reports.

use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use config::{Map, Value, ValueKind};

use super::error::ConfigErrors;

/// Describes a raw value for error messages: strings quoted, scalars as written.
pub fn describe(v: &Value) -> String {
    match &v.kind {
        ValueKind::Nil => "nothing".into(),
        ValueKind::Boolean(b) => b.to_string(),
        ValueKind::I64(n) => n.to_string(),
        ValueKind::I128(n) => n.to_string(),
        ValueKind::U64(n) => n.to_string(),
        ValueKind::U128(n) => n.to_string(),
        ValueKind::Float(x) => x.to_string(),
        ValueKind::String(s) => format!("{s:?}"),
        ValueKind::Table(_) => "a table".into(),
        ValueKind::Array(_) => "an array".into(),
    }
}

/// One table of the configuration, with its key path. Keys read are remembered so
/// [`Table::finish`] can report the unknown ones.
pub struct Table<'a> {
    pub path: String,
    map: &'a Map<String, Value>,
    /// Which of the map's keys (by position) were read.
    used: Vec<bool>,
}

impl<'a> Table<'a> {
    pub fn new(path: impl Into<String>, map: &'a Map<String, Value>) -> Self {
        Self {
            path: path.into(),
            map,
            used: vec![false; map.len()],
        }
    }

    /// The key path of `key` inside this table.
    pub fn key(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Whether the key is present (and marks it as known).
    pub fn has(&mut self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// The raw value of `key`, marking it as known.
    pub fn raw(&mut self, key: &str) -> Option<&'a Value> {
        self.note(key, String::new);
        let (i, _, v) = self.map.get_full(key)?;
        self.used[i] = true;
        Some(v)
    }

    /// Reports every key that was never read as unknown.
    pub fn finish(self, errs: &mut ConfigErrors) {
        for (k, used) in self.map.keys().zip(&self.used) {
            if !used {
                errs.push(self.key(k), "unknown key");
            }
        }
    }

    /// Reports `key` as not valid here (for keys that belong to another kind or mode).
    pub fn reject(&mut self, key: &str, why: &str, errs: &mut ConfigErrors) {
        if let Some(v) = self.raw(key) {
            errs.push(self.key(key), format!("{} is not valid {why}", describe(v)));
        }
    }

    /// Tells the configuration reference's drift test (and nothing else) that the validator
    /// reads `key` here, and as what kind of value (empty: not said by this reader).
    #[inline]
    fn note(&self, key: &str, kind: impl FnOnce() -> String) {
        #[cfg(test)]
        crate::keys::record::note(&self.key(key), kind());
        #[cfg(not(test))]
        let _ = (key, kind);
    }

    fn missing(&self, key: &str, errs: &mut ConfigErrors) {
        errs.push(self.key(key), "missing (required)");
    }

    fn wrong_type(&self, key: &str, expected: &str, v: &Value, errs: &mut ConfigErrors) {
        errs.push(
            self.key(key),
            format!("expected {expected}, found {}", describe(v)),
        );
    }

    /// An optional string.
    pub fn string(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<String> {
        self.note(key, || "string".into());
        let v = self.raw(key)?;
        match &v.kind {
            ValueKind::String(s) => Some(s.clone()),
            _ => {
                self.wrong_type(key, "a string", v, errs);
                None
            }
        }
    }

    /// A required string.
    pub fn req_string(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<String> {
        if !self.has(key) {
            self.missing(key, errs);
            return None;
        }
        self.string(key, errs)
    }

    /// An optional string from a fixed set of words, returning the matching value.
    pub fn choice<T: Copy>(
        &mut self,
        key: &str,
        choices: &[(&str, T)],
        errs: &mut ConfigErrors,
    ) -> Option<T> {
        self.note(key, || {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(", "))
        });
        let s = self.string(key, errs)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, t)) => Some(*t),
            None => {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                errs.push(
                    self.key(key),
                    format!("{s:?} is not one of {}", names.join(", ")),
                );
                None
            }
        }
    }

    /// An optional integer within `range`.
    pub fn int(
        &mut self,
        key: &str,
        range: RangeInclusive<i64>,
        errs: &mut ConfigErrors,
    ) -> Option<i64> {
        self.note(key, || {
            format!("integer {}..={}", range.start(), range.end())
        });
        let v = self.raw(key)?;
        let n = match &v.kind {
            ValueKind::I64(n) => Some(*n),
            ValueKind::U64(n) => i64::try_from(*n).ok(),
            ValueKind::I128(n) => i64::try_from(*n).ok(),
            ValueKind::U128(n) => i64::try_from(*n).ok(),
            _ => {
                self.wrong_type(key, "an integer", v, errs);
                return None;
            }
        };
        match n {
            Some(n) if range.contains(&n) => Some(n),
            _ => {
                errs.push(
                    self.key(key),
                    format!(
                        "{} is out of range {}..={}",
                        describe(v),
                        range.start(),
                        range.end()
                    ),
                );
                None
            }
        }
    }

    /// A required integer within `range`.
    pub fn req_int(
        &mut self,
        key: &str,
        range: RangeInclusive<i64>,
        errs: &mut ConfigErrors,
    ) -> Option<i64> {
        if !self.has(key) {
            self.missing(key, errs);
            return None;
        }
        self.int(key, range, errs)
    }

    /// An optional boolean.
    pub fn bool(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<bool> {
        self.note(key, || "boolean".into());
        let v = self.raw(key)?;
        match &v.kind {
            ValueKind::Boolean(b) => Some(*b),
            _ => {
                self.wrong_type(key, "true or false", v, errs);
                None
            }
        }
    }

    /// An optional duration written as a string such as `"2s"` or `"500ms"`, within `range`.
    pub fn duration(
        &mut self,
        key: &str,
        range: RangeInclusive<Duration>,
        errs: &mut ConfigErrors,
    ) -> Option<Duration> {
        self.note(key, || {
            format!(
                "duration {}..={}",
                humantime::format_duration(*range.start()),
                humantime::format_duration(*range.end())
            )
        });
        let v = self.raw(key)?;
        let ValueKind::String(s) = &v.kind else {
            self.wrong_type(key, "a duration such as \"2s\" or \"500ms\"", v, errs);
            return None;
        };
        match humantime::parse_duration(s.trim()) {
            Ok(d) if range.contains(&d) => Some(d),
            Ok(_) => {
                errs.push(
                    self.key(key),
                    format!(
                        "{s:?} is out of range {}..={}",
                        humantime::format_duration(*range.start()),
                        humantime::format_duration(*range.end())
                    ),
                );
                None
            }
            Err(e) => {
                errs.push(
                    self.key(key),
                    format!("{s:?} is not a duration such as \"2s\" or \"500ms\" ({e})"),
                );
                None
            }
        }
    }

    /// An optional IP address.
    pub fn ip(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<IpAddr> {
        self.note(key, || "IP address".into());
        let s = self.string(key, errs)?;
        match s.parse::<IpAddr>() {
            Ok(ip) => Some(ip),
            Err(_) => {
                errs.push(
                    self.key(key),
                    format!("{s:?} is not an IPv4 or IPv6 address"),
                );
                None
            }
        }
    }

    /// A required IP address.
    pub fn req_ip(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<IpAddr> {
        if !self.has(key) {
            self.missing(key, errs);
            return None;
        }
        self.ip(key, errs)
    }

    /// An optional `ip:port` socket address.
    pub fn socket_addr(
        &mut self,
        key: &str,
        errs: &mut ConfigErrors,
    ) -> Option<std::net::SocketAddr> {
        self.note(key, || "address:port".into());
        let s = self.string(key, errs)?;
        match s.parse() {
            Ok(a) => Some(a),
            Err(_) => {
                errs.push(
                    self.key(key),
                    format!("{s:?} is not an address:port such as \"127.0.0.1:9300\""),
                );
                None
            }
        }
    }

    /// An optional array of strings; each element error names its index.
    pub fn strings(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<Vec<(String, String)>> {
        self.note(key, || "array of strings".into());
        let v = self.raw(key)?;
        let ValueKind::Array(items) = &v.kind else {
            self.wrong_type(key, "an array of strings", v, errs);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let path = format!("{}[{i}]", self.key(key));
            match &item.kind {
                ValueKind::String(s) => out.push((path, s.clone())),
                _ => errs.push(path, format!("expected a string, found {}", describe(item))),
            }
        }
        Some(out)
    }

    /// An optional sub-table.
    pub fn table(&mut self, key: &str, errs: &mut ConfigErrors) -> Option<Table<'a>> {
        self.note(key, || "table".into());
        let v = self.raw(key)?;
        match &v.kind {
            ValueKind::Table(map) => Some(Table::new(self.key(key), map)),
            _ => {
                self.wrong_type(key, "a table", v, errs);
                None
            }
        }
    }

    /// An optional array of tables (`[[key]]`), each with its index; paths are set by the
    /// caller once it knows the element's name.
    pub fn tables(
        &mut self,
        key: &str,
        errs: &mut ConfigErrors,
    ) -> Vec<(usize, &'a Map<String, Value>)> {
        self.note(key, || "array of tables".into());
        let Some(v) = self.raw(key) else {
            return Vec::new();
        };
        let ValueKind::Array(items) = &v.kind else {
            self.wrong_type(key, &format!("[[{key}]] tables"), v, errs);
            return Vec::new();
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            match &item.kind {
                ValueKind::Table(map) => out.push((i, map)),
                _ => errs.push(
                    format!("{}[{i}]", self.key(key)),
                    format!("expected a table, found {}", describe(item)),
                ),
            }
        }
        out
    }
}

/// The name of an array-of-tables element, used to build readable key paths: `vip "web"`,
/// or `vip[3]` when the element has no usable name.
pub fn element_path(prefix: &str, section: &str, index: usize, map: &Map<String, Value>) -> String {
    let base = if prefix.is_empty() {
        section.to_string()
    } else {
        format!("{prefix}.{section}")
    };
    match map.get("name").map(|v| &v.kind) {
        Some(ValueKind::String(name)) if !name.is_empty() => format!("{base} {name:?}"),
        _ => format!("{base}[{index}]"),
    }
}
