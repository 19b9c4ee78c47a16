//! cvsm is the blocking Rust client for the cvsm team secrets manager.
//!
//! ```no_run
//! use cvsm::{Client, ClientOptions};
//!
//! let client = Client::new(ClientOptions { team: Some("acme".into()), ..Default::default() })?;
//! let database_url = client.get("DATABASE_URL")?;
//! let injected = client.inject(false)?; // every secret into the process environment
//! # let _ = (database_url, injected);
//! # Ok::<(), cvsm::Error>(())
//! ```
//!
//! Options left `None` come from `CVSM_TOKEN`, `CVSM_BASE_URL`, `CVSM_TEAM`,
//! `CVSM_ENVIRONMENT`, `CVSM_CACHE_TTL`, `CVSM_TIMEOUT`, `CVSM_MAX_RETRIES`
//! and `CVSM_CA_FILE`. Values are cached per client for 30 seconds by
//! default; failed GETs are retried on network errors and 502/503/504. Every
//! failure is a [`cvsm::Error`](Error) variant carrying its status, request id
//! and suggestion.
//!
//! The transport is a blocking [`ureq`] 3 agent, re-exported as
//! [`cvsm::ureq`](ureq): [`ClientBuilder::agent`] takes your own.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod client;
mod error;
mod options;
mod proxy;
mod transport;

pub use client::{Client, ClientBuilder};
pub use error::{Error, Result};
pub use options::{
    ClientOptions, DEFAULT_CACHE_TTL, DEFAULT_ENVIRONMENT, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT,
};

/// The HTTP client the SDK uses, re-exported so that an agent passed to
/// [`ClientBuilder::agent`] comes from the same ureq version.
pub use ureq;

/// USER_AGENT is the `User-Agent` header the client sends: `cvsm-rust/<version>`.
pub const USER_AGENT: &str = transport::USER_AGENT;
