use cvsm::{Client, ClientOptions};

fn main() -> Result<(), cvsm::Error> {
    // The token and the base URL come from CVSM_TOKEN and CVSM_BASE_URL.
    let client = Client::new(ClientOptions {
        team: Some("acme".into()),
        ..Default::default()
    })?;
    let database_url = client.get("DATABASE_URL")?;
    let injected = client.inject(false)?; // every secret of the environment into std::env
    println!(
        "DATABASE_URL has {} characters; injected {injected:?}",
        database_url.len()
    );
    Ok(())
}
