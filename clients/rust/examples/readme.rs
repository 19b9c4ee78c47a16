use cvsm::Client;

fn main() -> Result<(), cvsm::Error> {
    // The token, the base URL and the team come from CVSM_TOKEN, CVSM_BASE_URL and CVSM_TEAM.
    let client = Client::from_env()?;
    let database_url = client.get("DATABASE_URL")?;
    let injected = client.inject(false)?; // every secret of the environment into std::env
    println!(
        "DATABASE_URL has {} characters; injected {injected:?}",
        database_url.len()
    );
    Ok(())
}
