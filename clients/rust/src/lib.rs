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
//! `CVSM_ENVIRONMENT`, `CVSM_CACHE_TTL`, `CVSM_TIMEOUT`, `CVSM_MAX_RETRIES`,
//! `CVSM_CA_FILE`, `CVSM_STALE_IF_ERROR` and `CVSM_LIVE`. A `get` is one
//! request (by name); [`Client::refresh`] is one past the cache. Values are cached per client for 30 seconds by default; failed
//! GETs are retried on network errors and 502/503/504. Every failure is a
//! [`cvsm::Error`](Error) variant carrying its status, request id and
//! suggestion.
//!
//! With `stale_if_error` set, a refresh that fails with a network error, a
//! 5xx or a 429 answers with the value kept from before, for that long past
//! its freshness: [`Client::get_with_meta`] says so in [`Served::stale`], and
//! a warning goes once per name to the [`log`](https://docs.rs/log) facade.
//!
//! With `live` set, one connection per client to the team's change stream,
//! on a thread of its own, makes a changed secret stop being served from the
//! cache at once (see [`Client`]'s "Live cache").
//!
//! For an end-to-end team, whose server holds only ciphertext, the token
//! carries its private key after a dot (`cvsm_<64 hex>.<key>`): the client
//! sends only the part before it, fetches the team key wrapped to the token
//! once, and opens each value itself; a value that does not open is an
//! [`Error::Decryption`].
//!
//! The client is blocking: every call blocks the calling thread (there is
//! no async client). Its requests go through an [`HttpClient`], by default
//! one of its own (on ureq, which stays private to cvsm: no HTTP library's
//! types are part of this API); [`ClientBuilder::http_client`] takes yours.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod builder;
mod cache;
mod client;
mod e2e;
mod error;
mod http;
mod live;
mod options;
mod proxy;
mod served;
mod transport;
mod ureq_client;
mod wire;

pub use builder::ClientBuilder;
pub use client::Client;
pub use error::{Error, Result};
pub use http::{HttpClient, HttpError, HttpErrorKind, HttpRequest, HttpResponse};
pub use options::{
    ClientOptions, DEFAULT_CACHE_TTL, DEFAULT_ENVIRONMENT, DEFAULT_MAX_RETRIES, DEFAULT_TIMEOUT,
};
pub use served::Served;

/// The `User-Agent` header the client sends: `cvsm-rust/<version>`.
pub const USER_AGENT: &str = transport::USER_AGENT;
