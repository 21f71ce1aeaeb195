//! The admin API over real HTTP against a real broker: every route, auth failures, validation
//! errors (clear 4xx, state read back unchanged), spawn tokens, teardown through the API.

use reqwest::{Method, StatusCode};
use sandboxd_domain::call::Call;
use sandboxd_domain::roles::Verb;
use secrecy::SecretString;
use serde_json::{Value, json};

use crate::support::{App, app, app_with_switch, ok, unique};

async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{status}: not JSON ({e}): {text}"))
    };
    (status, value)
}

/// Asserts a JSON error answer with this status and code; returns its message.
fn refused(answer: &(StatusCode, Value), status: StatusCode, code: &str) -> String {
    assert_eq!(answer.0, status, "{:?}", answer.1);
    assert_eq!(answer.1["error"], code, "{:?}", answer.1);
    answer.1["message"].as_str().expect("a message").to_owned()
}

/// Every documented route as (method, path with sample parameters).
async fn documented_routes(app: &App) -> Vec<(Method, String)> {
    let (status, doc) = send(app.anonymous(Method::GET, "/v1/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("path item").keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
            let concrete = path
                .replace("{slug}", "sample")
                .replace("{owner}", "sample")
                .replace("{name}", "sample");
            routes.push((method, concrete));
        }
    }
    routes
}

#[tokio::test]
async fn every_route_refuses_a_missing_or_wrong_token_and_nothing_runs() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let before_projects = app.broker().projects().await.expect("projects");
            let before_audit = app.audit_total().await;
            let routes = documented_routes(&app).await;
            assert!(routes.len() >= 14, "{routes:?}");
            let body = json!({"slug": "intruder", "role": "developer", "project": project.as_str(),
                              "sandbox_db_enabled": true, "title": "x"});
            for (method, path) in &routes {
                for token in [None, Some("wrong-token"), Some("")] {
                    let mut request = app.anonymous(method.clone(), path).json(&body);
                    if let Some(token) = token {
                        request = request.bearer_auth(token);
                    }
                    let response = request.send().await.expect("request");
                    assert_eq!(
                        response.status(),
                        StatusCode::UNAUTHORIZED,
                        "{method} {path} {token:?}"
                    );
                    assert_eq!(
                        response.headers()["www-authenticate"]
                            .to_str()
                            .expect("ascii")
                            .split(' ')
                            .next(),
                        Some("Bearer"),
                        "{method} {path}"
                    );
                    let answer: Value = response.json().await.expect("json");
                    assert_eq!(answer["error"], "unauthorized");
                }
                // A token in another scheme is no token.
                let response = app
                    .anonymous(method.clone(), path)
                    .header(
                        "authorization",
                        format!("Basic {}", crate::support::ADMIN_TOKEN),
                    )
                    .send()
                    .await
                    .expect("request");
                assert_eq!(
                    response.status(),
                    StatusCode::UNAUTHORIZED,
                    "{method} {path}"
                );
            }
            // Nothing ran: no audit row, no agent, same projects, switch still off.
            assert_eq!(app.audit_total().await, before_audit);
            assert!(app.broker().agents(None).await.expect("agents").is_empty());
            assert_eq!(
                app.broker().projects().await.expect("projects"),
                before_projects
            );
            assert!(!app.stored_switch().await);
        })
        .await;
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_served_routes() {
    app()
        .await
        .run(|app| async move {
            let expected = [
                ("GET", "/v1/settings"),
                ("PUT", "/v1/settings"),
                ("POST", "/v1/restart"),
                ("GET", "/v1/projects"),
                ("GET", "/v1/projects/{slug}"),
                ("PUT", "/v1/projects/{slug}"),
                ("GET", "/v1/agents"),
                ("POST", "/v1/agents"),
                ("GET", "/v1/agents/{slug}"),
                ("DELETE", "/v1/agents/{slug}"),
                ("GET", "/v1/tasks"),
                ("POST", "/v1/tasks"),
                ("GET", "/v1/sandboxes"),
                ("DELETE", "/v1/sandboxes/{owner}"),
                ("GET", "/v1/audit"),
                ("POST", "/v1/janitor/run"),
                ("GET", "/v1/pools"),
                ("PUT", "/v1/pools/{pool}"),
                ("GET", "/v1/sources"),
                ("GET", "/v1/sources/{name}"),
                ("PUT", "/v1/sources/{name}"),
                ("DELETE", "/v1/sources/{name}"),
                ("POST", "/v1/sources/{name}/snapshot"),
            ];
            let (_, doc) = send(app.anonymous(Method::GET, "/v1/openapi.json")).await;
            assert!(doc["openapi"].as_str().expect("version").starts_with("3."));
            let mut documented = Vec::new();
            for (path, item) in doc["paths"].as_object().expect("paths") {
                for (method, operation) in item.as_object().expect("item") {
                    documented.push((method.to_uppercase(), path.clone()));
                    assert!(
                        operation["responses"]["401"].is_object(),
                        "{method} {path} documents its 401"
                    );
                }
            }
            documented.sort();
            let mut want: Vec<(String, String)> = expected
                .iter()
                .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
                .collect();
            want.sort();
            assert_eq!(documented, want);
            assert_eq!(doc["security"][0]["admin_token"], json!([]));
            assert_eq!(
                doc["components"]["securitySchemes"]["admin_token"]["scheme"],
                "bearer"
            );
            // Every documented route is served (with the token it answers something other
            // than "no such route").
            for (method, path) in documented_routes(&app).await {
                let (status, body) = send(app.api(method.clone(), &path).json(&json!({}))).await;
                let no_route = body["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("no such admin API route"));
                assert!(!no_route, "{method} {path}");
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            }
            // The document the library builds is the one served.
            let built = serde_json::to_value(sandboxd_admin::openapi()).expect("json");
            assert_eq!(built["paths"], doc["paths"]);
        })
        .await;
}

#[tokio::test]
async fn unknown_admin_routes_answer_a_json_404() {
    app()
        .await
        .run(|app| async move {
            let answer = send(app.api(Method::GET, "/v1/nope")).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
            let answer = send(app.api(Method::DELETE, "/v1/settings")).await;
            assert_eq!(answer.0, StatusCode::METHOD_NOT_ALLOWED);
        })
        .await;
}

#[tokio::test]
async fn settings_store_the_switch_for_the_next_restart() {
    app()
        .await
        .run(|app| async move {
            let (status, settings) = send(app.api(Method::GET, "/v1/settings")).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(settings["sandbox_db_enabled_stored"], false);
            assert_eq!(settings["sandbox_db_enabled_running"], false);

            let (status, settings) = send(
                app.api(Method::PUT, "/v1/settings")
                    .json(&json!({"sandbox_db_enabled": true})),
            )
            .await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(settings["sandbox_db_enabled_stored"], true);
            assert_eq!(
                settings["sandbox_db_enabled_running"], false,
                "not before a restart"
            );
            assert!(
                settings["takes_effect"]
                    .as_str()
                    .expect("text")
                    .contains("restart")
            );

            // Caller mistakes: clear 4xx, nothing changed.
            let cases = [
                (json!({"sandbox_db_enabled": "no"}), "malformed_json"),
                (
                    json!({"sandbox_db_enabled": false, "extra": 1}),
                    "malformed_json",
                ),
                (json!({}), "malformed_json"),
            ];
            for (body, code) in cases {
                let answer = send(app.api(Method::PUT, "/v1/settings").json(&body)).await;
                refused(&answer, StatusCode::BAD_REQUEST, code);
            }
            let answer = send(
                app.api(Method::PUT, "/v1/settings")
                    .header("content-type", "application/json")
                    .body("{\"sandbox_db_enabled\": fal"),
            )
            .await;
            refused(&answer, StatusCode::BAD_REQUEST, "malformed_json");
            let answer = send(
                app.api(Method::PUT, "/v1/settings")
                    .body("{\"sandbox_db_enabled\": false}"),
            )
            .await;
            refused(
                &answer,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
            );
            let (_, settings) = send(app.api(Method::GET, "/v1/settings")).await;
            assert_eq!(settings["sandbox_db_enabled_stored"], true, "unchanged");
        })
        .await;
}

/// Every answer about a source says how it is reached over TLS (the one part of its DSN ever
/// shown), with a warning when the mode checks nothing on a host that is not loopback.
#[tokio::test]
async fn a_source_answer_carries_its_tls_and_a_warning_when_it_checks_nothing() {
    app()
        .await
        .run(|app| async move {
            let password = "pw-4e7a1c";
            let remote = format!("host=db.example.internal user=ro password={password} dbname=d");
            let (status, weak) = send(
                app.api(Method::PUT, "/v1/sources/weak")
                    .json(&json!({"dsn": format!("{remote} sslmode=require")})),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{weak}");
            assert_eq!(weak["tls"]["mode"], "require");
            assert_eq!(weak["tls"]["default"], false);
            assert_eq!(weak["tls"]["roots"], Value::Null);
            assert_eq!(weak["tls"]["loopback"], false);
            let warning = weak["tls"]["warning"].as_str().expect("a warning");
            assert!(warning.contains("verify-full"), "{warning}");
            let (_, strict) = send(
                app.api(Method::PUT, "/v1/sources/strict")
                    .json(&json!({"dsn": remote.clone()})),
            )
            .await;
            assert_eq!(strict["tls"]["mode"], "verify-full", "{strict}");
            assert_eq!(strict["tls"]["default"], true);
            assert_eq!(strict["tls"]["roots"], "system");
            assert_eq!(strict["tls"]["warning"], Value::Null);
            let (_, listed) = send(app.api(Method::GET, "/v1/sources")).await;
            let modes: Vec<&str> = listed
                .as_array()
                .expect("a list")
                .iter()
                .map(|s| s["tls"]["mode"].as_str().expect("a mode"))
                .collect();
            assert_eq!(modes, ["verify-full", "require"], "by name: {listed}");
            let refused_ca = send(app.api(Method::PUT, "/v1/sources/ca").json(&json!({
                "dsn": format!("{remote} sslrootcert=/nonexistent/ca.pem")
            })))
            .await;
            let message = refused(&refused_ca, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(message.contains("/nonexistent/ca.pem"), "{message}");
            let answers = format!("{weak} {strict} {listed} {message}");
            assert!(!answers.contains(password), "{answers}");
        })
        .await;
}

#[tokio::test]
async fn sources_take_a_dsn_and_never_give_it_back() {
    app()
        .await
        .run(|app| async move {
            let password = "pw-9d2b7e41";
            // Nothing answers on port 1: a snapshot fails at once, naming why.
            let dsn = format!("host=127.0.0.1 port=1 user=ro password={password} dbname=shop");
            let refused_privacy = send(
                app.api(Method::PUT, "/v1/sources/shop")
                    .json(&json!({"dsn": dsn, "privacy": "some-values"})),
            )
            .await;
            let message = refused(&refused_privacy, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(message.contains("keep-values, no-values"), "{message}");
            let bad_dsn = send(
                app.api(Method::PUT, "/v1/sources/shop")
                    .json(&json!({"dsn": format!("host = = {password}")})),
            )
            .await;
            let message = refused(&bad_dsn, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(!message.contains(password), "{message}");
            let (_, none) = send(app.api(Method::GET, "/v1/sources")).await;
            assert_eq!(none, json!([]), "nothing was created");

            let (status, source) = send(
                app.api(Method::PUT, "/v1/sources/shop")
                    .json(&json!({"dsn": dsn, "privacy": "no-values", "refresh_secs": 60})),
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{source}");
            assert_eq!(source["privacy"], "no-values");
            assert_eq!(source["snapshot"], Value::Null);
            let (_, listed) = send(app.api(Method::GET, "/v1/sources")).await;
            let (_, one) = send(app.api(Method::GET, "/v1/sources/shop")).await;
            let failed = send(app.api(Method::POST, "/v1/sources/shop/snapshot")).await;
            let message = refused(&failed, StatusCode::BAD_GATEWAY, "source_unreachable");
            assert!(message.contains("connect"), "{message}");
            let (_, after) = send(app.api(Method::GET, "/v1/sources/shop")).await;
            assert!(after["last_error"].is_string(), "{after}");
            let answers = format!("{source} {listed} {one} {message} {after}");
            assert!(
                !answers.contains(password) && !answers.contains("dsn"),
                "{answers}"
            );

            // A project names a registered source for a clonable engine it opted into; a
            // refusal changes nothing.
            let slug = unique("proj");
            let path = format!("/v1/projects/{slug}");
            let answer = send(app.api(Method::PUT, &path).json(&json!({
                "sandbox_services": ["postgres"], "sandbox_clones": {"postgres": "nowhere"}
            })))
            .await;
            let message = refused(&answer, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(message.contains("registered: shop"), "{message}");
            let answer = send(app.api(Method::GET, &path)).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
            let (status, project) = send(app.api(Method::PUT, &path).json(&json!({
                "sandbox_services": ["postgres"], "sandbox_clones": {"postgres": "shop"}
            })))
            .await;
            assert_eq!(status, StatusCode::OK, "{project}");
            assert_eq!(project["sandbox_clones"], json!({"postgres": "shop"}));
            let (_, kept) = send(
                app.api(Method::PUT, &path)
                    .json(&json!({"sandbox_services": ["postgres", "redis"]})),
            )
            .await;
            assert_eq!(
                kept["sandbox_clones"],
                json!({"postgres": "shop"}),
                "absent: unchanged"
            );
            // Privacy per project: the source is no-values, so keeping values is refused, as is
            // a mode that does not exist; nothing changes. Its own mode, written out, is kept.
            for (choice, says) in [
                ("shop:keep-values", "registered no-values"),
                ("shop:everything", "allowed: keep-values, no-values"),
            ] {
                let answer = send(app.api(Method::PUT, &path).json(&json!({
                    "sandbox_services": ["postgres"], "sandbox_clones": {"postgres": choice}
                })))
                .await;
                let message = refused(&answer, StatusCode::BAD_REQUEST, "invalid_input");
                assert!(message.contains(says), "{choice}: {message}");
            }
            let (_, unchanged) = send(app.api(Method::GET, &path)).await;
            assert_eq!(unchanged["sandbox_clones"], json!({"postgres": "shop"}));
            assert_eq!(unchanged["sandbox_services"], json!(["postgres", "redis"]));
            let (status, strict) = send(app.api(Method::PUT, &path).json(&json!({
                "sandbox_services": ["postgres", "redis"],
                "sandbox_clones": {"postgres": "shop:no-values"}
            })))
            .await;
            assert_eq!(status, StatusCode::OK, "{strict}");
            assert_eq!(
                strict["sandbox_clones"],
                json!({"postgres": "shop:no-values"})
            );
            let in_use = send(app.api(Method::DELETE, "/v1/sources/shop")).await;
            refused(&in_use, StatusCode::CONFLICT, "conflict");
            let (_, cleared) = send(
                app.api(Method::PUT, &path)
                    .json(&json!({"sandbox_services": ["postgres"],
                                                             "sandbox_clones": {}})),
            )
            .await;
            assert_eq!(cleared["sandbox_clones"], json!({}));
            let (status, _) = send(app.api(Method::DELETE, "/v1/sources/shop")).await;
            assert_eq!(status, StatusCode::NO_CONTENT);
            let gone = send(app.api(Method::DELETE, "/v1/sources/shop")).await;
            refused(&gone, StatusCode::NOT_FOUND, "not_found");

            let audit = app
                .broker()
                .audit_log(&sandboxd_domain::audit::AuditFilter {
                    limit: 1000,
                    ..Default::default()
                })
                .await
                .expect("audit");
            let rows = format!("{:?}", audit.entries);
            assert!(
                rows.contains("put_source") && rows.contains("snapshot"),
                "{rows}"
            );
            assert!(!rows.contains(password), "{rows}");
        })
        .await;
}

#[tokio::test]
async fn projects_are_validated_against_the_registry_and_allowlists() {
    app()
        .await
        .run(|app| async move {
            let slug = unique("proj");
            let path = format!("/v1/projects/{slug}");
            let (status, project) = send(app.api(Method::PUT, &path).json(&json!({
                "sandbox_services": ["postgres", "redis"],
                "sandbox_extensions": {"postgres": ["pg_trgm"]}
            })))
            .await;
            assert_eq!(status, StatusCode::OK, "{project}");
            assert_eq!(project["slug"], slug.as_str());
            assert_eq!(project["sandbox_services"], json!(["postgres", "redis"]));
            assert_eq!(
                project["sandbox_extensions"],
                json!({"postgres": ["pg_trgm"]})
            );
            let (status, read) = send(app.api(Method::GET, &path)).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(read, project);
            let (_, all) = send(app.api(Method::GET, "/v1/projects")).await;
            assert_eq!(all.as_array().expect("list").len(), 1);
            assert_eq!(all[0], project);

            let bad = [
                (
                    json!({"sandbox_services": ["postgres", "oracle"]}),
                    "unknown_engine",
                    "postgres, redis, mariadb, mongo",
                ),
                (
                    json!({"sandbox_services": ["postgres"],
                           "sandbox_extensions": {"postgres": ["plpython3u"]}}),
                    "feature_not_allowed",
                    "vector, postgis, pg_trgm, citext, uuid-ossp",
                ),
                (
                    json!({"sandbox_services": ["redis"],
                           "sandbox_extensions": {"redis": ["vector"]}}),
                    "feature_not_allowed",
                    "search, json, bloom",
                ),
                // Allowlisted, but this host's PostgreSQL (the process backend) has no pgvector.
                (
                    json!({"sandbox_services": ["postgres"],
                           "sandbox_extensions": {"postgres": ["vector"]}}),
                    "feature_unavailable",
                    "not available on this sandboxd's process backend",
                ),
                (
                    json!({"sandbox_services": ["postgres"],
                           "sandbox_extensions": {"redis": ["search"]}}),
                    "invalid_input",
                    "not in sandbox_services",
                ),
                (
                    json!({"sandbox_services": ["postgres"], "sandbox_extension": {}}),
                    "malformed_json",
                    "sandbox_extension",
                ),
                (
                    json!({"sandbox_services": "postgres"}),
                    "malformed_json",
                    "sandbox_services",
                ),
            ];
            for (body, code, names) in bad {
                let answer = send(app.api(Method::PUT, &path).json(&body)).await;
                let message = refused(&answer, StatusCode::BAD_REQUEST, code);
                assert!(message.contains(names), "{body}: {message}");
                let (_, read) = send(app.api(Method::GET, &path)).await;
                assert_eq!(read, project, "unchanged after {body}");
            }
            let answer = send(
                app.api(Method::PUT, &path)
                    .header("content-type", "application/json")
                    .body("{\"sandbox_services\": [\"postgres\""),
            )
            .await;
            refused(&answer, StatusCode::BAD_REQUEST, "malformed_json");

            // Injection-looking and otherwise invalid slugs never reach the store.
            for slug in [
                "x%27%3B%20DROP%20TABLE%20projects%3B--",
                "Upper",
                "%3Cscript%3E",
                "a..b",
                "-leading",
                &"a".repeat(49),
            ] {
                let answer = send(
                    app.api(Method::PUT, &format!("/v1/projects/{slug}"))
                        .json(&json!({"sandbox_services": ["postgres"]})),
                )
                .await;
                let message = refused(&answer, StatusCode::BAD_REQUEST, "invalid_name");
                assert!(!message.contains('<'), "{message}");
                let answer = send(app.api(Method::GET, &format!("/v1/projects/{slug}"))).await;
                refused(&answer, StatusCode::BAD_REQUEST, "invalid_name");
            }
            let (_, all) = send(app.api(Method::GET, "/v1/projects")).await;
            assert_eq!(
                all.as_array().expect("list").len(),
                1,
                "nothing was created"
            );

            let answer = send(app.api(Method::GET, "/v1/projects/no-such-project")).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");

            // Opting out: null and an empty list both mean "not opted in".
            for services in [json!(null), json!([])] {
                let (status, out) = send(
                    app.api(Method::PUT, &path)
                        .json(&json!({"sandbox_services": services})),
                )
                .await;
                assert_eq!(status, StatusCode::OK);
                assert_eq!(out["sandbox_services"], Value::Null);
                assert_eq!(out["sandbox_extensions"], Value::Null);
            }
        })
        .await;
}

#[tokio::test]
async fn spawn_answers_a_working_token_once_and_remove_revokes_it() {
    app()
        .await
        .run(|app| async move {
            let project = app
                .project(&["postgres", "redis"], &["postgres=pg_trgm"])
                .await;
            let slug = unique("dev");
            let (status, spawned) = send(app.api(Method::POST, "/v1/agents").json(&json!({
                "slug": slug, "role": "developer", "project": project.as_str()
            })))
            .await;
            assert_eq!(status, StatusCode::CREATED, "{spawned}");
            let token = spawned["token"].as_str().expect("token").to_owned();
            assert!(token.len() >= 32);
            let manifest: Vec<&str> = spawned["manifest"]
                .as_array()
                .expect("manifest")
                .iter()
                .map(|v| v.as_str().expect("verb"))
                .collect();
            assert!(manifest.contains(&"request_sandbox"), "{manifest:?}");
            assert_eq!(
                spawned["env"],
                json!({"ROBOCO_SANDBOX_SERVICES_AVAILABLE": "postgres,redis"})
            );
            assert!(
                spawned["briefing"]
                    .as_array()
                    .expect("briefing")
                    .iter()
                    .any(|line| line
                        .as_str()
                        .is_some_and(|l| l.contains("request_sandbox()")))
            );
            let agent = app
                .broker()
                .authenticate(&SecretString::from(token.clone()))
                .await
                .expect("authenticate")
                .expect("the token is the agent's");
            assert_eq!(agent.slug.as_str(), slug);

            // The token appears nowhere else.
            for path in [
                "/v1/agents".to_owned(),
                format!("/v1/agents?project={project}"),
                format!("/v1/agents/{slug}"),
                "/v1/audit".to_owned(),
            ] {
                let response = app.api(Method::GET, &path).send().await.expect("request");
                assert_eq!(response.status(), StatusCode::OK, "{path}");
                let text = response.text().await.expect("body");
                assert!(!text.contains(&token), "{path} shows the token");
                assert!(!text.contains("token_hash"), "{path} shows the hash");
                assert!(text.contains(&slug), "{path}: {text}");
            }
            let (_, listed) = send(app.api(Method::GET, "/v1/agents?project=other-project")).await;
            assert_eq!(listed, json!([]));

            // Mistakes.
            let spawn = |body: Value| app.api(Method::POST, "/v1/agents").json(&body);
            let answer = send(spawn(json!({"slug": slug, "role": "developer",
                                           "project": project.as_str()})))
            .await;
            refused(&answer, StatusCode::CONFLICT, "conflict");
            let answer = send(spawn(json!({"slug": unique("x"), "role": "overlord",
                                           "project": project.as_str()})))
            .await;
            let message = refused(&answer, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(message.contains("developer"), "names the roles: {message}");
            let answer = send(spawn(json!({"slug": unique("x"), "role": "developer",
                                           "project": "no-such-project"})))
            .await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
            let answer = send(spawn(json!({"slug": "Robert'); DROP TABLE agents;--",
                                           "role": "developer", "project": project.as_str()})))
            .await;
            refused(&answer, StatusCode::BAD_REQUEST, "invalid_name");
            let answer = send(spawn(json!({"slug": unique("x"), "role": "developer"}))).await;
            refused(&answer, StatusCode::BAD_REQUEST, "malformed_json");
            let answer = send(app.api(Method::GET, "/v1/agents?project=BAD")).await;
            refused(&answer, StatusCode::BAD_REQUEST, "invalid_name");
            assert_eq!(app.broker().agents(None).await.expect("agents").len(), 1);

            // Removal revokes the token.
            let (status, _) = send(app.api(Method::DELETE, &format!("/v1/agents/{slug}"))).await;
            assert_eq!(status, StatusCode::NO_CONTENT);
            assert!(
                app.broker()
                    .authenticate(&SecretString::from(token))
                    .await
                    .expect("authenticate")
                    .is_none()
            );
            let answer = send(app.api(Method::DELETE, &format!("/v1/agents/{slug}"))).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
            let answer = send(app.api(Method::GET, &format!("/v1/agents/{slug}"))).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
        })
        .await;
}

#[tokio::test]
async fn tasks_are_added_and_listed_by_project_and_state() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let other = app.project(&[], &[]).await;
            let (status, task) = send(app.api(Method::POST, "/v1/tasks").json(&json!({
                "project": project.as_str(), "title": "fix the login", "description": "details"
            })))
            .await;
            assert_eq!(status, StatusCode::CREATED, "{task}");
            assert_eq!(task["state"], "open");
            assert_eq!(task["claimed_by"], Value::Null);
            let (_, second) = send(app.api(Method::POST, "/v1/tasks").json(&json!({
                "project": other.as_str(), "title": "another"
            })))
            .await;
            assert_eq!(second["description"], "");

            let (_, listed) = send(app.api(
                Method::GET,
                &format!("/v1/tasks?project={project}&state=open"),
            ))
            .await;
            assert_eq!(listed, json!([task]));
            let (_, listed) = send(app.api(Method::GET, "/v1/tasks")).await;
            assert_eq!(listed.as_array().expect("list").len(), 2);
            let (_, listed) = send(app.api(Method::GET, "/v1/tasks?state=done")).await;
            assert_eq!(listed, json!([]));

            let answer = send(app.api(Method::GET, "/v1/tasks?state=finished")).await;
            let message = refused(&answer, StatusCode::BAD_REQUEST, "invalid_input");
            assert!(
                message.contains("in_progress"),
                "names the states: {message}"
            );
            let post = |body: Value| app.api(Method::POST, "/v1/tasks").json(&body);
            let answer = send(post(json!({"project": project.as_str(), "title": "  "}))).await;
            refused(&answer, StatusCode::BAD_REQUEST, "invalid_input");
            let answer = send(post(json!({"project": "nope", "title": "t"}))).await;
            refused(&answer, StatusCode::NOT_FOUND, "not_found");
            let answer = send(post(
                json!({"project": project.as_str(), "title": "t", "owner": "x"}),
            ))
            .await;
            refused(&answer, StatusCode::BAD_REQUEST, "malformed_json");
            let (_, listed) = send(app.api(Method::GET, "/v1/tasks")).await;
            assert_eq!(listed.as_array().expect("list").len(), 2, "nothing added");
        })
        .await;
}

#[tokio::test]
async fn sandboxes_are_listed_without_credentials_and_torn_down_through_the_api() {
    app_with_switch(true)
        .await
        .run(|app| async move {
            let project = app.project(&["postgres", "redis"], &[]).await;
            let dev = app.working_developer(&project).await;
            let answer = ok(app
                .broker()
                .call(&dev, Call::parse(Verb::RequestSandbox, json!({})))
                .await);
            let passwords: Vec<String> = answer
                .evidence
                .as_ref()
                .and_then(|e| e.as_array())
                .expect("evidence")
                .iter()
                .map(|e| e["password"].as_str().expect("password").to_owned())
                .collect();
            assert_eq!(passwords.len(), 2);
            assert_eq!(app.listed(&dev.slug).await.len(), 2);

            let response = app
                .api(Method::GET, "/v1/sandboxes")
                .send()
                .await
                .expect("request");
            assert_eq!(response.status(), StatusCode::OK);
            let text = response.text().await.expect("body");
            for password in &passwords {
                assert!(
                    !text.contains(password.as_str()),
                    "a credential in the listing"
                );
            }
            let sandboxes: Value = serde_json::from_str(&text).expect("json");
            let ours = sandboxes
                .as_array()
                .expect("list")
                .iter()
                .find(|s| s["owner"] == dev.slug.as_str())
                .expect("our sandbox is listed");
            assert_eq!(ours["engines"], json!(["postgres", "redis"]));
            assert_eq!(ours["backends"], json!(["process"]));
            assert_eq!(ours["status"], "live");
            let (created, used) = (
                ours["created_at_ms"].as_i64().expect("created"),
                ours["last_used_at_ms"]
                    .as_i64()
                    .expect("a tracked sandbox was used"),
            );
            assert!(used >= created, "last used {used} before created {created}");
            assert_eq!(ours["instances"].as_array().expect("instances").len(), 2);
            assert!(ours["instances"][0]["tracked"].as_bool().expect("bool"));

            let answer = send(app.api(Method::DELETE, "/v1/sandboxes/NOT%20A%20SLUG")).await;
            refused(&answer, StatusCode::BAD_REQUEST, "invalid_name");
            assert_eq!(app.listed(&dev.slug).await.len(), 2, "nothing torn down");

            let (status, out) =
                send(app.api(Method::DELETE, &format!("/v1/sandboxes/{}", dev.slug))).await;
            assert_eq!(status, StatusCode::OK, "{out}");
            assert_eq!(out["removed"], 2);
            assert!(
                app.listed(&dev.slug).await.is_empty(),
                "the backend lists none"
            );
            let (_, sandboxes) = send(app.api(Method::GET, "/v1/sandboxes")).await;
            assert_eq!(sandboxes, json!([]));
            // Idempotent.
            let (status, out) =
                send(app.api(Method::DELETE, &format!("/v1/sandboxes/{}", dev.slug))).await;
            assert_eq!(status, StatusCode::OK);
            assert_eq!(out["removed"], 0);
        })
        .await;
}

#[tokio::test]
async fn the_audit_log_pages_and_filters() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let other = app.project(&[], &[]).await;
            for i in 0..3 {
                send(app.api(Method::POST, "/v1/tasks").json(&json!({
                    "project": project.as_str(), "title": format!("t{i}")
                })))
                .await;
            }
            // A refused verb: the switch is off.
            let agent = app.developer(&project).await;
            let slug = &agent.slug;
            let refusal = app
                .broker()
                .call(&agent, Call::parse(Verb::RequestSandbox, json!({})))
                .await;
            assert!(refusal.is_error());

            let (status, page) = send(app.api(Method::GET, "/v1/audit?limit=2")).await;
            assert_eq!(status, StatusCode::OK);
            let total = page["total"].as_u64().expect("total");
            assert!(total >= 7, "{page}");
            assert_eq!(page["entries"].as_array().expect("entries").len(), 2);
            let cursor = page["next_before"]
                .as_str()
                .expect("a next page")
                .to_owned();
            let (_, older) =
                send(app.api(Method::GET, &format!("/v1/audit?limit=2&before={cursor}"))).await;
            assert_ne!(older["entries"][0]["id"], page["entries"][0]["id"]);
            assert_ne!(older["entries"][0]["id"], page["entries"][1]["id"]);
            assert!(older["entries"][0]["at_ms"].as_i64() <= page["entries"][1]["at_ms"].as_i64());

            let (_, by_project) =
                send(app.api(Method::GET, &format!("/v1/audit?project={project}"))).await;
            let entries = by_project["entries"].as_array().expect("entries");
            assert!(entries.len() >= 5);
            assert!(entries.iter().all(|e| e["project"] == project.as_str()));
            let (_, other_page) =
                send(app.api(Method::GET, &format!("/v1/audit?project={other}"))).await;
            assert!(
                other_page["entries"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .all(|e| e["project"] == other.as_str())
            );

            let (_, failed) = send(app.api(Method::GET, "/v1/audit?outcome=failed")).await;
            let entries = failed["entries"].as_array().expect("entries");
            assert!(!entries.is_empty());
            assert!(entries.iter().all(|e| e["outcome"] != "ok"));
            let code = entries[0]["outcome"].as_str().expect("code").to_owned();
            let (_, by_code) =
                send(app.api(Method::GET, &format!("/v1/audit?outcome={code}"))).await;
            assert!(
                by_code["entries"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .all(|e| e["outcome"] == code.as_str())
            );
            let (_, oks) = send(app.api(Method::GET, "/v1/audit?outcome=ok")).await;
            assert!(
                oks["entries"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .all(|e| e["outcome"] == "ok")
            );

            let (_, by_agent) =
                send(app.api(Method::GET, &format!("/v1/audit?agent={slug}"))).await;
            let entries = by_agent["entries"].as_array().expect("entries");
            assert!(!entries.is_empty());
            assert!(
                entries
                    .iter()
                    .all(|e| e["actor"] == format!("agent:{slug}"))
            );

            for (query, code) in [
                ("outcome=DROP%20TABLE", "invalid_input"),
                ("agent=Not%20A%20Slug", "invalid_name"),
                ("before=%27%20OR%201%3D1", "invalid_input"),
                ("limit=many", "invalid_query"),
            ] {
                let answer = send(app.api(Method::GET, &format!("/v1/audit?{query}"))).await;
                refused(&answer, StatusCode::BAD_REQUEST, code);
            }
        })
        .await;
}

#[tokio::test]
async fn the_janitor_runs_on_demand_and_is_audited() {
    app()
        .await
        .run(|app| async move {
            let (status, report) = send(app.api(Method::POST, "/v1/janitor/run")).await;
            assert_eq!(status, StatusCode::OK, "{report}");
            assert_eq!(report["examined"], 0);
            assert_eq!(report["reaped"], json!([]));
            let page = app
                .broker()
                .audit_log(&Default::default())
                .await
                .expect("audit");
            assert_eq!(page.entries[0].action, "janitor_run");
        })
        .await;
}

#[tokio::test]
async fn warm_pools_are_listed_and_resized_and_the_sizes_outlive_a_restart() {
    let pool = |engine: &str| sandboxd_broker::PoolConfig {
        engine: sandboxd_domain::EngineRef::parse(engine).expect("registered"),
        clone_of: None,
        features: Default::default(),
        min_idle: 1,
        max_total: 2,
    };
    crate::support::spawn_app(crate::support::AppSpec {
        pools: vec![pool("postgres")],
        ..crate::support::AppSpec::default()
    })
    .await
    .expect("process app")
    .run(|app| async move {
        let (status, pools) = send(app.api(Method::GET, "/v1/pools")).await;
        assert_eq!(status, StatusCode::OK, "{pools}");
        assert_eq!(pools[0]["engine"], "postgres");
        assert_eq!(pools[0]["pool"], "postgres");
        assert_eq!(pools[0]["clone_of"], serde_json::Value::Null);
        assert_eq!(pools[0]["backend"], "process");
        assert_eq!(
            (pools[0]["min_idle"].clone(), pools[0]["max_total"].clone()),
            (json!(1), json!(2))
        );
        assert_eq!(pools[0]["idle"], 0, "the pools' task is not running here");

        // Refusals name what is allowed, and change nothing.
        for (path, body, expected, names) in [
            (
                "/v1/pools/postgres",
                json!({"min_idle": 5, "max_total": 2}),
                StatusCode::BAD_REQUEST,
                "must not exceed max_total",
            ),
            (
                "/v1/pools/postgres",
                json!({"min_idle": 0, "max_total": 0}),
                StatusCode::BAD_REQUEST,
                "at least 1",
            ),
            (
                "/v1/pools/postgres@shop",
                json!({"min_idle": 1, "max_total": 2}),
                StatusCode::NOT_FOUND,
                "sandboxd sources add shop",
            ),
            (
                "/v1/pools/redis@shop",
                json!({"min_idle": 1, "max_total": 2}),
                StatusCode::BAD_REQUEST,
                "redis cannot be a clone; clonable: postgres",
            ),
            (
                "/v1/pools/oracle",
                json!({"min_idle": 1, "max_total": 2}),
                StatusCode::BAD_REQUEST,
                "allowed: ",
            ),
            (
                "/v1/pools/postgres",
                json!({"max_total": 2}),
                StatusCode::BAD_REQUEST,
                "min_idle",
            ),
        ] {
            let (status, answer) = send(app.api(Method::PUT, path).json(&body)).await;
            assert_eq!(status, expected, "{path} {body}: {answer}");
            assert!(
                answer["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(names)),
                "{path} {body}: {answer}"
            );
        }
        let (_, unchanged) = send(app.api(Method::GET, "/v1/pools")).await;
        assert_eq!(unchanged.as_array().map(Vec::len), Some(1), "{unchanged}");
        assert_eq!(unchanged[0]["max_total"], 2);

        // A pool of an engine the backend runs, not in the config file, is added.
        let (status, added) = send(
            app.api(Method::PUT, "/v1/pools/redis")
                .json(&json!({"min_idle": 1})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{added}");
        assert_eq!(added["pool"], "redis");
        assert_eq!(
            (added["min_idle"].clone(), added["max_total"].clone()),
            (json!(1), json!(4)),
            "a new pool's ceiling is 4 when left out"
        );

        let (status, resized) = send(
            app.api(Method::PUT, "/v1/pools/postgres")
                .json(&json!({"min_idle": 3, "max_total": 5})),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{resized}");
        assert_eq!(
            (resized["min_idle"].clone(), resized["max_total"].clone()),
            (json!(3), json!(5))
        );
        let page = app
            .broker()
            .audit_log(&Default::default())
            .await
            .expect("audit");
        assert_eq!(page.entries[0].action, "set_setting");
        assert!(
            page.entries[0].detail.contains("min_idle 3, max_total 5"),
            "{:?}",
            page.entries[0]
        );

        app.restart().await;
        let (_, after) = send(app.api(Method::GET, "/v1/pools")).await;
        let sizes = |name: &str| {
            let pool = after
                .as_array()
                .and_then(|pools| pools.iter().find(|p| p["pool"] == name))
                .unwrap_or_else(|| panic!("{name} in {after}"));
            (pool["min_idle"].clone(), pool["max_total"].clone())
        };
        assert_eq!(sizes("postgres"), (json!(3), json!(5)), "{after}");
        assert_eq!(sizes("redis"), (json!(1), json!(4)), "{after}");
    })
    .await;
}
