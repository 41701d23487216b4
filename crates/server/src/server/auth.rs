//! Who may connect: SCRAM-SHA-256 against a users list, or `trust` on a
//! loopback address only. Passwords are salted and hashed as they are loaded
//! and never kept, logged or echoed.

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{SCRAM_ITERATIONS, ScramAuth, gen_salted_password};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata,
};
use pgwire::api::{ClientInfo, PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use rand::RngCore;

use super::ServerError;
use super::sqlstate::{INVALID_AUTHORIZATION, INVALID_CATALOG_NAME, fatal};

/// Users and their SCRAM secrets (salt and salted password; never the password).
pub struct Users {
    secrets: HashMap<String, Secret>,
    /// Keys the made-up salt of unknown users (see `get_password`).
    mock_key: ring::hmac::Key,
}

impl Default for Users {
    fn default() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Self {
            secrets: HashMap::new(),
            mock_key: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key),
        }
    }
}

struct Secret {
    salt: Vec<u8>,
    salted: Vec<u8>,
}

impl Debug for Users {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: secrets stay out of every log.
        let mut names: Vec<&String> = self.secrets.keys().collect();
        names.sort();
        f.debug_struct("Users").field("names", &names).finish()
    }
}

impl Users {
    /// Adds a user from `NAME:PASSWORD` (a users-file line or `--user`).
    pub fn add_entry(&mut self, entry: &str) -> Result<(), ServerError> {
        let (name, password) = entry.split_once(':').ok_or_else(|| {
            ServerError::Users("a user is NAME:PASSWORD (the colon is missing)".into())
        })?;
        let name = name.trim();
        if name.is_empty() || password.is_empty() {
            return Err(ServerError::Users(
                "a user needs a non-empty name and password".into(),
            ));
        }
        if self.secrets.contains_key(name) {
            return Err(ServerError::Users(format!("user {name:?} is given twice")));
        }
        let mut salt = vec![0u8; 16];
        rand::rng().fill_bytes(&mut salt);
        let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        self.secrets
            .insert(name.to_owned(), Secret { salt, salted });
        Ok(())
    }

    /// Reads a users file: one `NAME:PASSWORD` per line, `#` comments.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ServerError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServerError::Users(format!("cannot read {}: {e}", path.display())))?;
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            self.add_entry(line).map_err(|e| {
                ServerError::Users(format!("{} line {}: {e}", path.display(), n + 1))
            })?;
        }
        Ok(())
    }

    /// Whether no user has been added.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }
}

#[async_trait]
impl AuthSource for Users {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let user = login.user().unwrap_or_default();
        match self.secrets.get(user) {
            Some(s) => Ok(Password::new(Some(s.salt.clone()), s.salted.clone())),
            // An unknown user goes through the same exchange with a secret
            // nobody knows, and a salt that is the same at every attempt (as
            // a real user's is), so the answer does not tell which names exist.
            None => {
                let tag = ring::hmac::sign(&self.mock_key, user.as_bytes());
                let salt = tag.as_ref()[..16].to_vec();
                let mut salted = vec![0u8; 32];
                rand::rng().fill_bytes(&mut salted);
                Ok(Password::new(Some(salt), salted))
            }
        }
    }
}

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum AuthMode {
    /// Anyone who can reach the socket; loopback addresses only.
    Trust,
    /// SCRAM-SHA-256 against these users.
    Scram(Arc<Users>),
}

impl AuthMode {
    /// Refuses `trust` on an address other machines can reach.
    pub fn check(&self, listen: &SocketAddr) -> Result<(), ServerError> {
        if matches!(self, AuthMode::Trust) && !listen.ip().is_loopback() {
            return Err(ServerError::TrustNotLoopback(*listen));
        }
        Ok(())
    }
}

/// The `trust` handshake.
pub struct Trust {
    pids: Arc<RandomPidSecretKeyGenerator>,
}

#[async_trait]
impl StartupHandler for Trust {
    /// pgwire's no-auth handshake, with tablesql's startup parameters
    /// (pgwire's own name a `-pgwire-` server version).
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(ref startup) = message {
            protocol_negotiation(client, startup).await?;
            save_startup_parameters_to_metadata(client, startup);
            let (pid, secret_key) = self.pids.generate(client);
            client.set_pid_and_secret_key(pid, secret_key);
            finish_authentication(client, &parameters()).await?;
        }
        Ok(())
    }
}

/// The database a startup message names (`database` and `user` are its
/// parameters of those names): its `database`, else, as in PostgreSQL,
/// its user's name.
fn connected_database(database: Option<&String>, user: Option<&String>) -> String {
    database
        .filter(|d| !d.is_empty())
        .or(user)
        .cloned()
        .unwrap_or_default()
}

/// The parameters a client is told at startup: pgwire's, with tablesql's
/// PostgreSQL version (`planner::identity`).
pub fn parameters() -> DefaultServerParameterProvider {
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = crate::engine::PG_VERSION.to_owned();
    params
}

/// One connection's startup: the TLS policy, then the auth exchange. A
/// connection gets its own, since the SCRAM exchange keeps state.
pub struct Startup {
    require_tls: bool,
    kind: StartupKind,
    /// The database names a client may connect to (none: every name).
    databases: Arc<[String]>,
    /// The connection's session, put in the database it names.
    session: crate::engine::Session,
}

enum StartupKind {
    Trust(Trust),
    Scram(Box<SASLAuthStartupHandler<DefaultServerParameterProvider>>),
}

impl Startup {
    /// `pids` is the server's one generator: backend pids must be unique
    /// across connections, since a cancel request names one.
    pub fn new(
        mode: &AuthMode,
        require_tls: bool,
        pids: Arc<RandomPidSecretKeyGenerator>,
        databases: Arc<[String]>,
        session: crate::engine::Session,
    ) -> Self {
        let kind = match mode {
            AuthMode::Trust => StartupKind::Trust(Trust { pids }),
            AuthMode::Scram(users) => {
                let source: Arc<dyn AuthSource> = users.clone();
                let mut scram = ScramAuth::new(source);
                scram.set_iterations(SCRAM_ITERATIONS);
                let params = Arc::new(parameters());
                StartupKind::Scram(Box::new(
                    SASLAuthStartupHandler::new(params)
                        .with_scram(scram)
                        .with_pid_secret_key_generator(pids),
                ))
            }
        };
        Self {
            require_tls,
            kind,
            databases,
            session,
        }
    }
}

#[async_trait]
impl StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let startup = matches!(message, PgWireFrontendMessage::Startup(_));
        if self.require_tls && startup && !client.is_secure() {
            return Err(fatal(
                INVALID_AUTHORIZATION,
                "this server accepts TLS connections only (connect with sslmode=require)",
            ));
        }
        if let PgWireFrontendMessage::Startup(startup) = &message {
            let p = &startup.parameters;
            let database = connected_database(p.get("database"), p.get("user"));
            if !self.databases.is_empty() && !self.databases.contains(&database) {
                return Err(fatal(
                    INVALID_CATALOG_NAME,
                    format!("database \"{database}\" does not exist"),
                ));
            }
            // Before the first Parse: a prepared plan keeps the database
            // it was planned in.
            self.session.set_database(&database);
        }
        match &self.kind {
            StartupKind::Trust(h) => h.on_startup(client, message).await,
            StartupKind::Scram(h) => h.on_startup(client, message).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_parse_and_hide_secrets() {
        let mut users = Users::default();
        users.add_entry("alice:s3cret:with:colons").unwrap();
        assert!(users.add_entry("alice:again").is_err());
        assert!(users.add_entry("nopassword").is_err());
        assert!(users.add_entry(":x").is_err());
        let shown = format!("{users:?}");
        assert!(shown.contains("alice") && !shown.contains("s3cret"));
    }

    #[tokio::test]
    async fn unknown_users_get_a_stable_salt() {
        let users = Users::default();
        let users = &users;
        let salt = |p: Password| p.salt().map(<[u8]>::to_vec);
        let login = |name: &'static str| async move {
            let mut client =
                pgwire::api::DefaultClient::<()>::new("127.0.0.1:1".parse().expect("addr"), false);
            client.metadata_mut().insert("user".into(), name.into());
            users
                .get_password(&LoginInfo::from_client_info(&client))
                .await
        };
        let a1 = salt(login("mallory").await.unwrap());
        let a2 = salt(login("mallory").await.unwrap());
        let b = salt(login("trent").await.unwrap());
        assert_eq!(a1, a2);
        assert_ne!(a1, b);
    }

    #[test]
    fn trust_only_on_loopback() {
        let lo: SocketAddr = "127.0.0.1:5433".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:5433".parse().unwrap();
        assert!(AuthMode::Trust.check(&lo).is_ok());
        assert!(AuthMode::Trust.check(&any).is_err());
        let scram = AuthMode::Scram(Arc::new(Users::default()));
        assert!(scram.check(&any).is_ok());
    }
}
