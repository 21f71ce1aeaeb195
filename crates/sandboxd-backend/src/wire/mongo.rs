//! MongoDB over the official driver. Users live in the `admin` database (authSource=admin).

use std::time::Duration;

use mongodb::Client;
use mongodb::bson::{Document, doc};
use mongodb::options::{ClientOptions, Credential, ServerAddress};
use sandboxd_domain::Credentials;
use sandboxd_domain::engine::{AdminAccess, AdminStep, ServerFacts};
use secrecy::ExposeSecret;

use super::{Reach, WireError, major_version, password_admin};

const TIMEOUT: Duration = Duration::from_secs(3);

fn client(reach: Reach<'_>, creds: Option<&Credentials>) -> Result<Client, WireError> {
    let credential = creds.map(|c| {
        Credential::builder()
            .username(c.user.clone())
            .password(c.password.expose_secret().to_owned())
            .source("admin".to_owned())
            .build()
    });
    let options = ClientOptions::builder()
        .hosts(vec![ServerAddress::Tcp {
            host: reach.host.to_owned(),
            port: Some(reach.port),
        }])
        .credential(credential)
        .direct_connection(true)
        .server_selection_timeout(TIMEOUT)
        .connect_timeout(TIMEOUT)
        .app_name("sandboxd".to_owned())
        .build();
    Client::with_options(options).map_err(WireError::from_display)
}

fn admin_creds(admin: &AdminAccess) -> Result<&Credentials, WireError> {
    password_admin(admin, "MongoDB")
}

pub(super) async fn server_facts(
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<ServerFacts, WireError> {
    let client = client(reach, Some(admin_creds(admin)?))?;
    let info = client
        .database("admin")
        .run_command(doc! { "buildInfo": 1 })
        .await
        .map_err(WireError::from_display)?;
    Ok(ServerFacts {
        major_version: info.get_str("version").ok().and_then(major_version),
    })
}

pub(super) async fn run_step(
    admin: Option<&AdminAccess>,
    reach: Reach<'_>,
    step: &AdminStep,
) -> Result<(), WireError> {
    let AdminStep::MongoCommand { database, command } = step else {
        return Err(WireError("MongoDB runs command documents only".into()));
    };
    let creds = admin.map(admin_creds).transpose()?;
    let json: serde_json::Value =
        serde_json::from_str(command.expose_secret()).map_err(WireError::from_display)?;
    let command: Document =
        mongodb::bson::serialize_to_document(&json).map_err(WireError::from_display)?;
    client(reach, creds)?
        .database(database)
        .run_command(command)
        .await
        .map(drop)
        .map_err(WireError::from_display)
}

pub(super) async fn probe(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<(), WireError> {
    client(reach, Some(agent))?
        .database(database)
        .run_command(doc! { "ping": 1 })
        .await
        .map(drop)
        .map_err(WireError::from_display)
}

/// The server's version, asked as the handed-out account.
pub(super) async fn version(
    reach: Reach<'_>,
    agent: &Credentials,
    database: &str,
) -> Result<String, WireError> {
    let answer = client(reach, Some(agent))?
        .database(database)
        .run_command(doc! { "buildInfo": 1 })
        .await
        .map_err(WireError::from_display)?;
    answer
        .get_str("version")
        .map(str::to_owned)
        .map_err(WireError::from_display)
}
