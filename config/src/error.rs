//! Configuration errors: each names the key path, the value, and what to fix.

use std::fmt;
use std::path::PathBuf;

/// One problem in a configuration, located by its key path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigError {
    /// Where in the file: `appliance.interfaces`, `vip "web".backend[1].weight`, ...
    pub key: String,
    /// What is wrong, naming the offending value.
    pub message: String,
}

/// Every problem found in one configuration (never empty when returned as an error).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    pub fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError {
            key: key.into(),
            message: message.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = &ConfigError> {
        self.0.iter()
    }

    /// The first error whose key is exactly `key` (for tests and API responses).
    pub fn find(&self, key: &str) -> Option<&ConfigError> {
        self.0.iter().find(|e| e.key == key)
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Why a configuration file could not be turned into a [`super::Config`].
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("config file {path}: not found")]
    NotFound { path: PathBuf },
    #[error("config file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: empty (it needs at least [appliance] and one [[vip]])")]
    Empty { path: PathBuf },
    #[error(
        "config file {path}: larger than {} MiB: not a Sluice configuration (is this the \
         right file?)",
        crate::MAX_FILE >> 20
    )]
    TooLarge { path: PathBuf },
    #[error(
        "config file {path}: line {line}: byte 0x{byte:02x} is not text (a configuration is a \
         text file: is this the right file?)"
    )]
    NotText {
        path: PathBuf,
        line: usize,
        byte: u8,
    },
    #[error("config file {path}: not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("environment override: {0}")]
    Environment(String),
    #[error("config file {path}: {} error(s):\n{errors}", errors.len())]
    Invalid { path: PathBuf, errors: ConfigErrors },
}

impl LoadError {
    /// The validation errors, when the file parsed but did not validate.
    pub fn errors(&self) -> Option<&ConfigErrors> {
        match self {
            LoadError::Invalid { errors, .. } => Some(errors),
            _ => None,
        }
    }
}
