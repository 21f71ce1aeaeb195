//! Warm-pool members on both backends: started without any agent account, held with a
//! superuser connection, made ready (the account minted and proven by its own login while
//! idle, where a connection is held), then handed out: the account is re-checked, the owner is
//! recorded where `list` reads it (a renamed container, rewritten metadata), and the instance
//! is as a cold provision would have made it — reset, teardown and liveness included. A ready
//! member whose account changed after its proof is torn down, never handed out.

use std::collections::BTreeSet;

use sandboxd_backend::{Backend, IdleMember, InstanceHandle};
use sandboxd_domain::{AgentSlug, Instance};

use crate::docker::{Harness, MARIADB, POSTGRES, REDIS, harness_owner};
use crate::reset::every_round;
use crate::support::{self, ProcessHarness, request};

/// Idle members of postgres (with pg_trgm), redis and mariadb, checked while idle and then
/// made ready.
async fn idle_members(backend: &dyn Backend) -> Vec<IdleMember> {
    let slots: Vec<AgentSlug> = (0..3).map(|_| AgentSlug::pool_slot()).collect();
    let requests = [
        request("postgres", &slots[0], &["pg_trgm"]),
        request("redis", &slots[1], &[]),
        request("mariadb", &slots[2], &[]),
    ];
    let (pg, redis, mariadb) = tokio::join!(
        backend.provision_idle(&requests[0]),
        backend.provision_idle(&requests[1]),
        backend.provision_idle(&requests[2]),
    );
    let mut members = vec![
        pg.expect("an idle postgres"),
        redis.expect("an idle redis"),
        mariadb.expect("an idle mariadb"),
    ];
    let listed = backend.list().await.expect("list");
    for member in &mut members {
        member
            .check_on(backend)
            .await
            .expect("an idle member answers its superuser");
        let instance = &member.instance;
        assert!(instance.owner.is_pool_slot(), "{}", instance.name);
        let found = listed
            .iter()
            .find(|l| l.handle.name == instance.name)
            .unwrap_or_else(|| panic!("{} is listed", instance.name));
        assert_eq!(found.handle.owner, instance.owner, "listed under its slot");
        // Nobody can log in as the agent yet: no account was minted (Redis's was started
        // with a password nobody was given).
        let stranger = Instance {
            agent: sandboxd_domain::Credentials::generate(instance.engine.agent_user),
            ..instance.clone()
        };
        assert!(
            sandboxd_backend::wire::probe(
                instance.engine.get(),
                sandboxd_backend::wire::Reach {
                    host: &instance.host,
                    port: instance.port,
                },
                &stranger.agent,
                &instance.database,
            )
            .await
            .is_err(),
            "{}: an account before hand-out",
            instance.name
        );
    }
    let mut ready = Vec::new();
    for member in members {
        let member = member.ready(backend).await.expect("made ready");
        // Postgres and Redis hold a connection: their account exists and logged in already;
        // MariaDB's is minted and proven at hand-out.
        let holds = member.instance.engine.name != "mariadb";
        assert_eq!(
            member.proven_for().is_some(),
            holds,
            "{}",
            member.instance.name
        );
        ready.push(member);
    }
    ready
}

/// Hands each member to `owner` and checks what the agent and the janitor would see.
async fn hand_out_all(
    backend: &dyn Backend,
    members: Vec<IdleMember>,
    owner: &AgentSlug,
) -> Vec<Instance> {
    let mut handed = Vec::new();
    let mut passwords = BTreeSet::new();
    for member in members {
        let slot_name = member.instance.name.clone();
        let instance = backend.hand_out(member, owner).await.expect("hand-out");
        assert_eq!(&instance.owner, owner);
        assert!(
            passwords
                .insert(secrecy::ExposeSecret::expose_secret(&instance.agent.password).to_owned())
        );
        let listed = backend.list().await.expect("list");
        let found = listed
            .iter()
            .find(|l| l.handle.name == instance.name)
            .unwrap_or_else(|| panic!("{} (was {slot_name}) is listed", instance.name));
        assert_eq!(&found.handle.owner, owner, "listed as its new owner's");
        assert!(
            backend
                .is_live(&InstanceHandle::of(&instance))
                .await
                .expect("is_live"),
            "{} is live under its new owner",
            instance.name
        );
        handed.push(instance);
    }
    let listed = backend.list().await.expect("list");
    assert!(
        !listed.iter().any(|l| l.handle.owner.is_pool_slot()),
        "no slot owner is left: {listed:?}"
    );
    let pg = &handed[0];
    let client = support::pg(pg).await;
    let owns: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_database d JOIN pg_roles r ON r.oid = d.datdba \
             WHERE d.datname = current_database() AND r.rolname = current_user",
            &[],
        )
        .await
        .expect("ownership")
        .get(0);
    assert_eq!(owns, 1, "the agent owns its database");
    let trgm: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'",
            &[],
        )
        .await
        .expect("extensions")
        .get(0);
    assert_eq!(trgm, 1, "the pool's feature is active");
    handed
}

#[tokio::test]
async fn process_pool_members_are_handed_out_as_cold_instances_would_be() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let members = idle_members(backend.as_ref()).await;
            let owner = support::owner("pool");
            let handed = hand_out_all(backend.as_ref(), members, &owner).await;
            let [pg, redis, mariadb] = [&handed[0], &handed[1], &handed[2]];
            every_round(backend.as_ref(), [pg, redis, mariadb]).await;
        })
        .await;
}

#[tokio::test]
async fn docker_pool_members_are_handed_out_as_cold_instances_would_be() {
    let Some(harness) = Harness::new("dpool", &[POSTGRES, REDIS, MARIADB], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, _| async move {
            let members = idle_members(backend.as_ref()).await;
            let owner = harness_owner("dpool");
            let handed = hand_out_all(backend.as_ref(), members, &owner).await;
            let [pg, redis, mariadb] = [&handed[0], &handed[1], &handed[2]];
            every_round(backend.as_ref(), [pg, redis, mariadb]).await;
        })
        .await;
}

#[tokio::test]
async fn a_ready_member_whose_account_changed_is_torn_down_not_handed_out() {
    ProcessHarness::new(|_| {})
        .run(|backend| async move {
            let slots: Vec<AgentSlug> = (0..2).map(|_| AgentSlug::pool_slot()).collect();
            let owner = support::owner("broken");
            for (engine, slot) in ["postgres", "redis"].into_iter().zip(&slots) {
                let member = backend
                    .provision_idle(&request(engine, slot, &[]))
                    .await
                    .expect("an idle member");
                let mut member = member.ready(backend.as_ref()).await.expect("made ready");
                member.check_on(backend.as_ref()).await.expect("as proven");
                sandboxd_testkit::forbid_login(&member.instance).await;
                let err = member
                    .check_on(backend.as_ref())
                    .await
                    .expect_err("the check sees the change");
                assert!(
                    err.to_string().contains("not as it was when it was proven"),
                    "{engine}: {err}"
                );
                let handle = member.handle();
                let err = backend
                    .hand_out(member, &owner)
                    .await
                    .expect_err("a changed account is not handed out");
                assert!(
                    err.to_string().contains("not as it was when it was proven"),
                    "{engine}: {err}"
                );
                assert!(
                    !backend.is_live(&handle).await.expect("is_live"),
                    "{engine}: the member is torn down"
                );
            }
            let listed = backend.list().await.expect("list");
            assert!(listed.is_empty(), "nothing is left: {listed:?}");
        })
        .await;
}
