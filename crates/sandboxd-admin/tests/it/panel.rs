//! The panel over plain HTTP, as a browser without JavaScript would use it: the login gate,
//! cookies, CSRF, no script anywhere, escaping, saving the Sandbox card, and the Sources page
//! (on Docker: a real source registered, snapshotted, cloned by a project and removed).

use sandboxd_domain::call::Call;
use std::collections::BTreeMap;
use std::sync::Mutex;

use reqwest::{Method, StatusCode};
use sandboxd_domain::ProjectSlug;

use crate::support::{ADMIN_TOKEN, App, app, unique};

/// A minimal browser: keeps cookies, follows nothing by itself.
struct Browser<'a> {
    app: &'a App,
    cookies: Mutex<BTreeMap<String, String>>,
}

struct Page {
    status: StatusCode,
    location: Option<String>,
    headers: reqwest::header::HeaderMap,
    set_cookies: Vec<String>,
    html: String,
}

impl<'a> Browser<'a> {
    fn new(app: &'a App) -> Self {
        Self {
            app,
            cookies: Mutex::new(BTreeMap::new()),
        }
    }

    async fn request(&self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> Page {
        let cookie = self
            .cookies
            .lock()
            .expect("lock")
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut request = self.app.anonymous(method, path);
        if !cookie.is_empty() {
            request = request.header("cookie", cookie);
        }
        if let Some(form) = form {
            request = request.form(form);
        }
        let response = request.send().await.expect("request");
        let set_cookies: Vec<String> = response
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect();
        for set in &set_cookies {
            let pair = set.split(';').next().expect("pair");
            let (name, value) = pair.split_once('=').expect("name=value");
            let mut cookies = self.cookies.lock().expect("lock");
            if set.contains("Max-Age=0") {
                cookies.remove(name);
            } else {
                cookies.insert(name.to_owned(), value.to_owned());
            }
        }
        Page {
            status: response.status(),
            location: response
                .headers()
                .get("location")
                .map(|v| v.to_str().expect("ascii").to_owned()),
            headers: response.headers().clone(),
            set_cookies,
            html: response.text().await.expect("body"),
        }
    }

    async fn get(&self, path: &str) -> Page {
        self.request(Method::GET, path, None).await
    }

    async fn post(&self, path: &str, form: &[(&str, &str)]) -> Page {
        self.request(Method::POST, path, Some(form)).await
    }

    /// Logs in through the form; returns the session's CSRF token (read from a page).
    async fn login(&self) -> String {
        let page = self.get("/login").await;
        let csrf = hidden(&page.html, "csrf");
        let page = self
            .post("/login", &[("csrf", &csrf), ("token", ADMIN_TOKEN)])
            .await;
        assert_eq!(page.status, StatusCode::SEE_OTHER, "{}", page.html);
        let page = self.get("/settings").await;
        assert_eq!(page.status, StatusCode::OK);
        hidden(&page.html, "csrf")
    }
}

/// The value of the first hidden input named `name`.
fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().expect("value").to_owned()
}

/// True when some attribute is an `on…=` event handler.
fn has_inline_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(at, _)| {
        let rest = &html[at + 3..];
        let name_len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        name_len > 0 && rest[name_len..].starts_with('=')
    })
}

#[tokio::test]
async fn pages_are_behind_the_login_and_the_login_sets_a_strict_http_only_cookie() {
    app()
        .await
        .run(|app| async move {
            let browser = Browser::new(&app);
            for path in [
                "/",
                "/settings",
                "/projects",
                "/sandboxes",
                "/audit",
                "/projects/x",
            ] {
                let page = browser.get(path).await;
                assert_eq!(page.status, StatusCode::SEE_OTHER, "{path}");
                assert_eq!(page.location.as_deref(), Some("/login"), "{path}");
            }
            let login = browser.get("/login").await;
            assert_eq!(login.status, StatusCode::OK);
            let csrf = hidden(&login.html, "csrf");

            // A wrong token: 401, no session.
            let page = browser
                .post("/login", &[("csrf", &csrf), ("token", "not-the-token")])
                .await;
            assert_eq!(page.status, StatusCode::UNAUTHORIZED);
            assert!(page.html.contains("not the admin token"));
            assert!(
                !page
                    .set_cookies
                    .iter()
                    .any(|c| c.starts_with("sandboxd_session="))
            );
            assert!(
                !page.html.contains("not-the-token"),
                "the attempt is not echoed"
            );

            // A login form posted from elsewhere (no matching login cookie): refused.
            let stranger = Browser::new(&app);
            let page = stranger
                .post("/login", &[("csrf", &csrf), ("token", ADMIN_TOKEN)])
                .await;
            assert_eq!(page.status, StatusCode::FORBIDDEN);
            assert!(stranger.get("/settings").await.location.is_some());

            let page = browser.get("/login").await;
            let csrf = hidden(&page.html, "csrf");
            let page = browser
                .post("/login", &[("csrf", &csrf), ("token", ADMIN_TOKEN)])
                .await;
            assert_eq!(page.status, StatusCode::SEE_OTHER);
            let session = page
                .set_cookies
                .iter()
                .find(|c| c.starts_with("sandboxd_session="))
                .expect("a session cookie");
            assert!(session.contains("HttpOnly"), "{session}");
            assert!(session.contains("SameSite=Strict"), "{session}");
            assert!(session.contains("Path=/"), "{session}");
            assert!(!session.contains(ADMIN_TOKEN));
            let page = browser.get("/settings").await;
            assert_eq!(page.status, StatusCode::OK);

            // Both attempts are audited, and nothing typed is kept.
            let audit = app
                .broker()
                .audit_log(&Default::default())
                .await
                .expect("audit");
            let logins: Vec<(&str, &str)> = audit
                .entries
                .iter()
                .filter(|e| e.action == "login")
                .map(|e| (e.subject.as_str(), e.outcome.as_str()))
                .collect();
            assert_eq!(logins, [("panel", "ok"), ("panel", "unauthorized")]);
            let rows = format!("{:?}", audit.entries);
            assert!(!rows.contains("not-the-token") && !rows.contains(ADMIN_TOKEN));

            // Logging out ends the session on the server, not only in the browser.
            let stolen = browser.cookies.lock().expect("lock").clone();
            let csrf = hidden(&page.html, "csrf");
            let page = browser.post("/logout", &[("csrf", &csrf)]).await;
            assert_eq!(page.location.as_deref(), Some("/login"));
            let replay = Browser::new(&app);
            *replay.cookies.lock().expect("lock") = stolen;
            assert_eq!(
                replay.get("/settings").await.location.as_deref(),
                Some("/login")
            );
        })
        .await;
}

#[tokio::test]
async fn every_page_works_without_script_and_sends_a_strict_policy() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &["postgres=pg_trgm"]).await;
            let browser = Browser::new(&app);
            browser.login().await;
            for path in [
                "/login".to_owned(),
                "/settings".to_owned(),
                "/projects".to_owned(),
                format!("/projects/{project}"),
                "/sandboxes".to_owned(),
                "/pools".to_owned(),
                "/sources".to_owned(),
                "/audit".to_owned(),
            ] {
                let page = browser.get(&path).await;
                assert!(
                    page.status == StatusCode::OK || page.status == StatusCode::SEE_OTHER,
                    "{path}: {}",
                    page.status
                );
                let html = page.html.to_lowercase();
                assert!(!html.contains("<script"), "{path} has a script");
                assert!(!has_inline_handler(&html), "{path} has an inline handler");
                assert!(
                    !html.contains("http://") && !html.contains("https://"),
                    "{path}: external asset"
                );
                let csp = page.headers["content-security-policy"]
                    .to_str()
                    .expect("ascii");
                assert!(csp.contains("default-src 'none'"), "{csp}");
                assert_eq!(page.headers["x-frame-options"], "DENY");
                // Every POST form carries the CSRF token.
                for form in html.split("<form").skip(1) {
                    let form = form.split("</form>").next().expect("form");
                    if form.contains("method=\"post\"") {
                        assert!(form.contains("name=\"csrf\""), "{path}: {form}");
                    }
                }
            }
            let css = browser.get("/assets/panel.css").await;
            assert_eq!(css.status, StatusCode::OK);
            assert!(
                css.headers["content-type"]
                    .to_str()
                    .expect("ascii")
                    .starts_with("text/css")
            );
        })
        .await;
}

#[tokio::test]
async fn a_post_without_the_session_csrf_token_changes_nothing() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let browser = Browser::new(&app);
            let csrf = browser.login().await;
            let audit_before = app.audit_total().await;
            for forged in ["", "0000", &"a".repeat(64)] {
                let page = browser
                    .post("/settings/sandbox-db", &[("csrf", forged), ("value", "on")])
                    .await;
                assert_eq!(page.status, StatusCode::FORBIDDEN);
                let page = browser
                    .post(
                        &format!("/projects/{project}"),
                        &[("csrf", forged), ("service", "redis")],
                    )
                    .await;
                assert_eq!(page.status, StatusCode::FORBIDDEN);
            }
            let page = browser
                .post("/settings/sandbox-db", &[("value", "on")])
                .await;
            assert_eq!(page.status, StatusCode::FORBIDDEN);
            assert!(!app.stored_switch().await);
            let stored = app.stored_project(&project).await;
            assert_eq!(stored.sandbox_services.expect("opted in").len(), 1);
            assert_eq!(app.audit_total().await, audit_before);

            // With the token it works, and says so once.
            let page = browser
                .post("/settings/sandbox-db", &[("csrf", &csrf), ("value", "on")])
                .await;
            assert_eq!(page.status, StatusCode::SEE_OTHER);
            let page = browser.get("/settings").await;
            assert!(
                page.html.contains("takes effect on next restart"),
                "{}",
                page.html
            );
            assert!(page.html.contains("flash-ok"));
            assert!(
                !browser.get("/settings").await.html.contains("flash-ok"),
                "shown once"
            );
            assert!(app.stored_switch().await);
        })
        .await;
}

/// The `action` of every POST form on a page.
fn post_actions(html: &str) -> Vec<String> {
    html.split("<form")
        .skip(1)
        .map(|form| form.split('>').next().expect("tag"))
        .filter(|tag| tag.contains("method=\"post\""))
        .filter_map(|tag| tag.split("action=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn every_panel_post_refuses_a_forged_token_before_its_handler_runs() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            let browser = Browser::new(&app);
            browser.login().await;
            let posts = [
                "/settings/sandbox-db".to_owned(),
                "/settings/restart".to_owned(),
                "/projects".to_owned(),
                format!("/projects/{project}"),
                "/sandboxes/dev-x/teardown".to_owned(),
                "/sandboxes/janitor".to_owned(),
                "/logout".to_owned(),
            ];
            // The list covers every POST form the pages offer.
            for page in [
                "/settings",
                "/projects",
                &format!("/projects/{project}"),
                "/sandboxes",
            ] {
                for action in post_actions(&browser.get(page).await.html) {
                    assert!(
                        posts.contains(&action),
                        "{page}: {action} is not checked here"
                    );
                }
            }
            let audit_before = app.audit_total().await;
            let stored_before = app.stored_project(&project).await;
            for path in &posts {
                let page = browser
                    .post(
                        path,
                        &[
                            ("csrf", &"b".repeat(64)),
                            ("value", "on"),
                            ("slug", "forged"),
                            ("service", "redis"),
                        ],
                    )
                    .await;
                assert_eq!(page.status, StatusCode::FORBIDDEN, "{path}");
                assert!(page.html.contains("This form has expired"), "{path}");
            }
            assert_eq!(app.audit_total().await, audit_before, "no handler ran");
            assert!(!app.stored_switch().await);
            assert_eq!(app.stored_project(&project).await, stored_before);
            assert_eq!(app.broker().projects().await.expect("projects").len(), 1);
            assert_eq!(
                browser.get("/settings").await.status,
                StatusCode::OK,
                "a forged logout logs nobody out"
            );
        })
        .await;
}

#[tokio::test]
async fn the_sandbox_card_saves_through_the_broker_and_refuses_what_it_refuses() {
    app()
        .await
        .run(|app| async move {
            let browser = Browser::new(&app);
            let csrf = browser.login().await;
            let slug = unique("web");
            let page = browser
                .post("/projects", &[("csrf", &csrf), ("slug", &slug)])
                .await;
            assert_eq!(page.location, Some(format!("/projects/{slug}")));
            let project = ProjectSlug::parse(&slug).expect("slug");
            let created = app.stored_project(&project).await;
            assert_eq!(created.sandbox_services, None);

            let card = browser.get(&format!("/projects/{slug}")).await.html;
            // Every engine and every allowlisted feature of the registry has its checkbox.
            for engine in sandboxd_domain::engines::all() {
                assert!(
                    card.contains(&format!("value=\"{}\"", engine.name)),
                    "{}",
                    engine.name
                );
                for feature in engine.features {
                    assert!(
                        card.contains(&format!("value=\"{}:{}\"", engine.name, feature.name)),
                        "{}:{}",
                        engine.name,
                        feature.name
                    );
                }
            }

            let page = browser
                .post(
                    &format!("/projects/{slug}"),
                    &[
                        ("csrf", &csrf),
                        ("service", "postgres"),
                        ("service", "redis"),
                        ("feature", "postgres:pg_trgm"),
                        ("size:postgres", "1G"),
                        ("size:redis", ""),
                    ],
                )
                .await;
            assert_eq!(page.status, StatusCode::SEE_OTHER);
            let saved = app.stored_project(&project).await;
            assert_eq!(
                saved.sandbox_sizes.to_map(),
                std::collections::BTreeMap::from([("postgres".to_owned(), "1G".to_owned())])
            );
            assert_eq!(
                saved
                    .sandbox_services
                    .as_ref()
                    .expect("opted in")
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>(),
                ["postgres", "redis"]
            );
            assert_eq!(
                saved
                    .sandbox_extensions
                    .as_ref()
                    .expect("features")
                    .to_map()["postgres"],
                ["pg_trgm"]
            );
            let card = browser.get(&format!("/projects/{slug}")).await.html;
            assert!(card.contains("Saved: postgres, redis."), "{card}");
            assert!(
                card.contains("id=\"feature-postgres-pg_trgm\" checked"),
                "{card}"
            );
            assert!(
                card.contains("id=\"size-postgres\"") && card.contains("value=\"1G\""),
                "the size is shown: {card}"
            );
            assert!(!card.contains("id=\"size-redis\""), "Redis takes no size");
            // This host's PostgreSQL has no pgvector: its box cannot be newly checked, and says
            // what provides it.
            assert!(
                card.contains("id=\"feature-postgres-vector\" disabled"),
                "{card}"
            );
            assert!(card.contains("chip unavailable"), "{card}");
            assert!(card.contains("pgvector"), "{card}");

            // A feature of a service left unchecked, a feature outside the allowlist, an
            // engine the registry does not know: refused with the reason, nothing changed.
            for (form, reason) in [
                (
                    vec![("service", "postgres"), ("feature", "redis:search")],
                    "not in sandbox_services",
                ),
                (
                    vec![("service", "postgres"), ("feature", "postgres:plpython3u")],
                    "vector, postgis",
                ),
                (
                    vec![("service", "postgres"), ("feature", "postgres:vector")],
                    "is not available on this sandboxd",
                ),
                (
                    vec![("service", "oracle")],
                    "postgres, redis, mariadb, mongo",
                ),
                (
                    vec![("service", "postgres"), ("size:postgres", "8G")],
                    "ceiling of 2G (broker.max_sandbox_size_mb = 2048)",
                ),
                (
                    vec![("service", "postgres"), ("size:mariadb", "1G")],
                    "a size for mariadb, which is not in sandbox_services",
                ),
                (
                    vec![("service", "postgres"), ("size:postgres", "lots")],
                    "is not a size",
                ),
                (
                    vec![
                        ("service", "postgres"),
                        ("feature", "<script>alert(1)</script>"),
                    ],
                    "unknown engine",
                ),
            ] {
                let mut fields = vec![("csrf", csrf.as_str())];
                fields.extend(form.iter().copied());
                let page = browser.post(&format!("/projects/{slug}"), &fields).await;
                assert_eq!(page.status, StatusCode::SEE_OTHER);
                let card = browser.get(&format!("/projects/{slug}")).await.html;
                assert!(card.contains("Not saved"), "{form:?}: {card}");
                assert!(card.contains(reason), "{form:?}: {card}");
                assert!(!card.contains("<script>alert"), "escaped");
                let after = app.stored_project(&project).await;
                assert_eq!(after, saved, "unchanged after {form:?}");
            }

            // Unchecking everything opts out.
            browser
                .post(&format!("/projects/{slug}"), &[("csrf", &csrf)])
                .await;
            let after = app.stored_project(&project).await;
            assert_eq!(after.sandbox_services, None);

            // Bad slugs are refused with the rule, not stored.
            let page = browser
                .post("/projects", &[("csrf", &csrf), ("slug", "Bad Slug<b>")])
                .await;
            assert_eq!(page.location.as_deref(), Some("/projects"));
            let list = browser.get("/projects").await.html;
            assert!(list.contains("invalid project slug"), "{list}");
            assert!(!list.contains("<b>"), "escaped");
            assert_eq!(app.broker().projects().await.expect("projects").len(), 1);
            assert_eq!(
                browser.get("/projects/no-such").await.status,
                StatusCode::NOT_FOUND
            );
        })
        .await;
}

#[tokio::test]
async fn text_from_agents_and_operators_is_escaped() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&[], &[]).await;
            app.broker()
                .add_task(
                    &project,
                    "<script>alert('x')</script>",
                    "<img src=x onerror=alert(1)>",
                )
                .await
                .expect("task");
            let browser = Browser::new(&app);
            browser.login().await;
            let page = browser.get(&format!("/projects/{project}")).await;
            assert!(!page.html.contains("<script>alert"), "{}", page.html);
            assert!(page.html.contains("&lt;script&gt;alert"), "{}", page.html);
            let page = browser.get("/audit").await;
            assert!(!page.html.contains("<script"));
        })
        .await;
}

#[tokio::test]
async fn the_audit_page_filters_and_pages() {
    app()
        .await
        .run(|app| async move {
            let project = app.project(&["postgres"], &[]).await;
            for i in 0..60 {
                app.broker()
                    .add_task(&project, &format!("task {i}"), "")
                    .await
                    .expect("task");
            }
            let browser = Browser::new(&app);
            browser.login().await;
            let page = browser.get(&format!("/audit?project={project}")).await;
            assert_eq!(page.status, StatusCode::OK);
            assert!(
                page.html.contains("50 of 61 matching entries"),
                "{}",
                page.html
            );
            let older = page
                .html
                .split("id=\"older\" href=\"")
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .expect("an older link")
                .replace("&amp;", "&");
            assert!(older.contains(&format!("project={project}")), "{older}");
            let page = browser.get(&older).await;
            assert!(
                page.html.contains("11 of 61 matching entries"),
                "{}",
                page.html
            );
            assert!(!page.html.contains("id=\"older\""));

            let page = browser.get("/audit?agent=NOT%20VALID").await;
            assert_eq!(page.status, StatusCode::BAD_REQUEST);
            assert!(page.html.contains("Filter refused"));
        })
        .await;
}

/// One login POST from `http` with the login page's double-submit `csrf` and `token`.
async fn post_login(
    app: &App,
    http: &reqwest::Client,
    csrf: &str,
    token: &str,
) -> reqwest::Response {
    http.post(format!("{}/login", app.url()))
        .header("cookie", format!("sandboxd_login={csrf}"))
        .form(&[("csrf", csrf), ("token", token)])
        .send()
        .await
        .expect("POST /login")
}

/// The login page's double-submit token, as `http` gets it.
async fn login_csrf(app: &App, http: &reqwest::Client) -> String {
    let page = http
        .get(format!("{}/login", app.url()))
        .send()
        .await
        .expect("GET /login");
    hidden(&page.text().await.expect("page"), "csrf")
}

#[tokio::test]
async fn wrong_tokens_get_429_and_a_bounded_audit_but_never_lock_out_the_right_one() {
    app()
        .await
        .run(|app| async move {
            let csrf = login_csrf(&app, &app.http).await;
            let before = app.audit_total().await;
            // Twenty wrong tokens at once from one client: the budget holds under concurrency.
            let burst = (0..20).map(|i| {
                let token = format!("wrong-token-{i}");
                let (app, csrf) = (&app, &csrf);
                async move { post_login(app, &app.http, csrf, &token).await }
            });
            let answers = futures::future::join_all(burst).await;
            let mut statuses = BTreeMap::<u16, usize>::new();
            for answer in &answers {
                *statuses.entry(answer.status().as_u16()).or_default() += 1;
                if answer.status() == StatusCode::TOO_MANY_REQUESTS {
                    let retry: u64 = answer.headers()["retry-after"]
                        .to_str()
                        .expect("ascii")
                        .parse()
                        .expect("whole seconds");
                    assert!((1..=60).contains(&retry), "{retry}");
                }
            }
            let allowed = sandboxd_admin::AdminConfig::DEFAULT_LOGIN_ATTEMPTS as usize;
            assert_eq!(
                statuses,
                BTreeMap::from([(401, allowed), (429, 20 - allowed)]),
                "the first {allowed} wrong tokens are answered 401, the rest 429"
            );
            // One row per wrong token within the budget, one for the whole run of refusals.
            let audit = app
                .broker()
                .audit_log(&Default::default())
                .await
                .expect("audit");
            assert_eq!(app.audit_total().await - before, allowed as u64 + 1);
            let mut outcomes: Vec<&str> = audit
                .entries
                .iter()
                .filter(|e| e.action == "login")
                .map(|e| e.outcome.as_str())
                .collect();
            outcomes.sort_unstable();
            let mut expected = vec!["unauthorized"; allowed];
            expected.insert(0, "rate_limited");
            assert_eq!(outcomes, expected);
            let limited = audit
                .entries
                .iter()
                .find(|e| e.outcome == "rate_limited")
                .expect("the rate_limited row");
            assert!(limited.detail.contains("127.0.0.1"), "{}", limited.detail);
            assert!(!format!("{:?}", audit.entries).contains("wrong-token"));

            // Whatever another process on the same address sent, the right token logs in (an
            // attacker on loopback cannot lock the operator out)…
            let right = post_login(&app, &app.http, &csrf, ADMIN_TOKEN).await;
            assert_eq!(
                right.status(),
                StatusCode::SEE_OTHER,
                "the right token logs in"
            );
            let total = app.audit_total().await;
            assert_eq!(
                total - before,
                allowed as u64 + 2,
                "and its login is audited"
            );
            // …and gives the client's budget back: the next wrong token is compared again.
            let csrf = login_csrf(&app, &app.http).await;
            let wrong = post_login(&app, &app.http, &csrf, "wrong-again").await;
            assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);

            // Another client has its own budget.
            let other = reqwest::Client::builder()
                .local_address("127.0.0.2".parse::<std::net::IpAddr>().ok())
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("a client from 127.0.0.2");
            let csrf = login_csrf(&app, &other).await;
            let answer = post_login(&app, &other, &csrf, "wrong-elsewhere").await;
            assert_eq!(answer.status(), StatusCode::UNAUTHORIZED, "its own budget");
        })
        .await;
}

#[tokio::test]
async fn the_right_token_logs_in_while_a_flood_of_wrong_ones_goes_on() {
    app()
        .await
        .run(|app| async move {
            let csrf = login_csrf(&app, &app.http).await;
            // A local process keeps the budget spent, as fast as it can…
            let stop = std::sync::atomic::AtomicBool::new(false);
            let flood = async {
                let mut sent = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let answer = post_login(&app, &app.http, &csrf, "guess").await;
                    assert!(
                        [StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS]
                            .contains(&answer.status()),
                        "{}",
                        answer.status()
                    );
                    sent += 1;
                }
                sent
            };
            // …while the operator, from the same address, logs in five times.
            let operator = async {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                for _ in 0..5 {
                    let csrf = login_csrf(&app, &app.http).await;
                    let answer = post_login(&app, &app.http, &csrf, ADMIN_TOKEN).await;
                    assert_eq!(answer.status(), StatusCode::SEE_OTHER, "logged in");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            };
            let (sent, ()) = tokio::join!(flood, operator);
            assert!(
                sent > sandboxd_admin::AdminConfig::DEFAULT_LOGIN_ATTEMPTS,
                "the flood spent the budget ({sent} attempts)"
            );
        })
        .await;
}

#[tokio::test]
async fn foreign_sandboxes_are_shown_apart_with_their_maker_and_cannot_be_torn_down() {
    crate::support::app_with_switch(true)
        .await
        .run(|app| async move {
            use sandboxd_backend::InstanceRequest;
            use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

            // One sandbox of this daemon, one `sandboxd provision` made beside it.
            let project = app.project(&["redis"], &[]).await;
            let dev = app.working_developer(&project).await;
            crate::support::ok(
                app.broker()
                    .call(
                        &dev,
                        Call::parse(
                            sandboxd_domain::roles::Verb::RequestSandbox,
                            serde_json::json!({}),
                        ),
                    )
                    .await,
            );
            let stranger = AgentSlug::parse(&unique("stranger")).expect("slug");
            app.track(&stranger);
            app.backend
                .provision(&InstanceRequest {
                    major: None,
                    engine: EngineRef::parse("redis").expect("registered"),
                    owner: stranger.clone(),
                    maker: DaemonId::cli(),
                    features: Default::default(),
                    size: None,
                })
                .await
                .expect("a CLI sandbox");

            let browser = Browser::new(&app);
            browser.login().await;
            let page = browser.get("/sandboxes").await;
            assert_eq!(page.status, StatusCode::OK);
            let (own, foreign) = page
                .html
                .split_once("id=\"foreign-card\"")
                .expect("a foreign card");
            assert!(
                own.contains(&format!("id=\"sandbox-{}\"", dev.slug)),
                "{own}"
            );
            assert!(!own.contains(stranger.as_str()), "{own}");
            assert!(
                foreign.contains(&format!("id=\"foreign-cli-{stranger}\"")),
                "{foreign}"
            );
            assert!(
                !foreign.contains(&format!("/sandboxes/{stranger}/teardown")),
                "no teardown button for a foreign sandbox: {foreign}"
            );
            let id = app.broker().daemon_id().to_string();
            assert!(page.html.contains(&id), "the daemon's own id is shown");

            // The API lists only this daemon's unless asked for all.
            let own: serde_json::Value = app
                .api(Method::GET, "/v1/sandboxes")
                .send()
                .await
                .expect("list")
                .json()
                .await
                .expect("json");
            assert!(
                own.as_array()
                    .expect("list")
                    .iter()
                    .all(|s| s["foreign"] == false)
            );
            let all: serde_json::Value = app
                .api(Method::GET, "/v1/sandboxes?all=true")
                .send()
                .await
                .expect("list")
                .json()
                .await
                .expect("json");
            assert!(
                all.as_array()
                    .expect("list")
                    .iter()
                    .any(|s| s["owner"] == stranger.as_str() && s["maker"] == "cli"),
                "{all}"
            );
            assert_eq!(app.listed(&stranger).await.len(), 1, "still there");
        })
        .await;
}

#[tokio::test]
async fn the_sources_page_registers_snapshots_and_removes_a_source_and_never_shows_its_dsn() {
    let Some(app) = crate::support::spawn_app(crate::support::AppSpec {
        kind: crate::support::Kind::Docker,
        enabled_override: Some(true),
        ..crate::support::AppSpec::default()
    })
    .await
    else {
        return;
    };
    app.run(|app| async move {
        // The source: a developer's own Postgres sandbox (a real server, PostgreSQL 17).
        let project = app.project(&["postgres"], &[]).await;
        let dev = app.working_developer(&project).await;
        let sandbox = crate::support::ok(
            app.broker()
                .call(
                    &dev,
                    Call::parse(
                        sandboxd_domain::roles::Verb::RequestSandbox,
                        serde_json::json!({}),
                    ),
                )
                .await,
        );
        let evidence = &sandbox.evidence.as_ref().expect("evidence")[0];
        let dsn = evidence["url"].as_str().expect("a url").to_owned();
        let password = evidence["password"]
            .as_str()
            .expect("a password")
            .to_owned();

        let browser = Browser::new(&app);
        let csrf = browser.login().await;
        let empty = browser.get("/sources").await;
        assert!(empty.html.contains("id=\"no-sources\""), "{}", empty.html);

        let refused = browser
            .post(
                "/sources",
                &[
                    ("csrf", &csrf),
                    ("name", "prod"),
                    ("dsn", &dsn),
                    ("privacy", "some-values"),
                    ("refresh_secs", "0"),
                ],
            )
            .await;
        assert_eq!(refused.location.as_deref(), Some("/sources"));
        let page = browser.get("/sources").await;
        assert!(
            page.html.contains("keep-values or no-values"),
            "{}",
            page.html
        );
        assert!(
            page.html.contains("id=\"no-sources\""),
            "nothing was created"
        );

        let saved = browser
            .post(
                "/sources",
                &[
                    ("csrf", &csrf),
                    ("name", "prod"),
                    ("dsn", &dsn),
                    ("privacy", "no-values"),
                    ("refresh_secs", "3600"),
                ],
            )
            .await;
        assert_eq!(saved.location.as_deref(), Some("/sources"));
        let page = browser.get("/sources").await;
        assert!(page.html.contains("Saved source prod"), "{}", page.html);
        assert!(page.html.contains("id=\"source-prod\""), "{}", page.html);
        assert!(page.html.contains("no snapshot yet"), "{}", page.html);
        assert!(page.html.contains("every 3600 s"), "{}", page.html);

        let snapshot = browser
            .post("/sources/prod/snapshot", &[("csrf", &csrf)])
            .await;
        assert_eq!(snapshot.location.as_deref(), Some("/sources"));
        let page = browser.get("/sources").await;
        assert!(
            page.html.contains("Took a snapshot of prod (PostgreSQL 17"),
            "{}",
            page.html
        );
        let row = page
            .html
            .split("id=\"source-prod\"")
            .nth(1)
            .expect("the row")
            .split("</tr>")
            .next()
            .expect("row end");
        assert!(row.contains("PostgreSQL 17"), "the version: {row}");
        assert!(
            row.contains("snapshot ") && row.contains(" old"),
            "the age: {row}"
        );
        // What it holds and left out: a PostgreSQL 17 source gives no column statistics, and
        // no-values strips the samples; both say why.
        assert!(row.contains("id=\"summary-prod\""), "the summary: {row}");
        assert!(row.contains("0 stats rows, 2 left out"), "{row}");
        assert!(
            row.contains("PostgreSQL 17 cannot import column statistics"),
            "{row}"
        );
        assert!(row.contains("privacy mode no-values"), "{row}");

        // The project's card offers the source for postgres, and saves the choice.
        let card = browser.get(&format!("/projects/{project}")).await.html;
        assert!(card.contains("name=\"clone:postgres\""), "{card}");
        assert!(card.contains("a clone of prod (no-values)"), "{card}");
        // A source without values offers no choice to strip them: it has none.
        assert!(!card.contains("value=\"prod:no-values\""), "{card}");
        assert!(
            !card.contains("name=\"clone:redis\""),
            "redis cannot be a clone"
        );
        let saved = browser
            .post(
                &format!("/projects/{project}"),
                &[
                    ("csrf", &csrf),
                    ("service", "postgres"),
                    ("clone:postgres", "prod"),
                ],
            )
            .await;
        assert_eq!(saved.status, StatusCode::SEE_OTHER);
        let stored = app.stored_project(&project).await;
        assert_eq!(
            stored
                .sandbox_clones
                .iter()
                .map(|(e, s)| format!("{}={s}", e.name))
                .collect::<Vec<_>>(),
            ["postgres=prod"]
        );
        let page = browser.get("/sources").await;
        assert!(
            page.html.contains(&format!("href=\"/projects/{project}\"")),
            "cloned by the project: {}",
            page.html
        );

        // Removing it is refused while the project clones it, then works.
        browser
            .post("/sources/prod/remove", &[("csrf", &csrf)])
            .await;
        let page = browser.get("/sources").await;
        assert!(page.html.contains("Not removed"), "{}", page.html);
        assert!(page.html.contains("id=\"source-prod\""), "still there");
        let all_pages = [
            page.html.clone(),
            browser.get(&format!("/projects/{project}")).await.html,
            browser.get("/audit").await.html,
        ];
        browser
            .post(
                &format!("/projects/{project}"),
                &[
                    ("csrf", &csrf),
                    ("service", "postgres"),
                    ("clone:postgres", ""),
                ],
            )
            .await;
        assert!(app.stored_project(&project).await.sandbox_clones.is_empty());
        browser
            .post("/sources/prod/remove", &[("csrf", &csrf)])
            .await;
        let page = browser.get("/sources").await;
        assert!(page.html.contains("Removed source prod"), "{}", page.html);
        assert!(page.html.contains("id=\"no-sources\""), "{}", page.html);

        for html in all_pages.iter().chain([&page.html]) {
            assert!(!html.contains(&password), "the DSN's password on a page");
            assert!(!html.contains(&dsn), "the DSN on a page");
        }
        crate::support::ok(
            app.broker()
                .call(
                    &dev,
                    Call::parse(
                        sandboxd_domain::roles::Verb::ReleaseSandbox,
                        serde_json::json!({}),
                    ),
                )
                .await,
        );
    })
    .await;
}

#[tokio::test]
async fn the_sources_page_shows_each_sources_tls_and_warns_of_one_that_checks_nothing() {
    let Some(app) = crate::support::spawn_app(crate::support::AppSpec {
        enabled_override: Some(true),
        ..crate::support::AppSpec::default()
    })
    .await
    else {
        return;
    };
    app.run(|app| async move {
        let browser = Browser::new(&app);
        let csrf = browser.login().await;
        let password = "pw-panel-tls-93d1";
        let remote = format!("host=db.example.internal user=ro password={password} dbname=d");
        let mut pages = Vec::new();
        for (name, dsn, flash) in [
            (
                "weak",
                format!("{remote} sslmode=require"),
                "Warning: sslmode=require on a host that is not loopback",
            ),
            (
                "strict",
                remote.clone(),
                "Saved source strict; take a snapshot",
            ),
        ] {
            let saved = browser
                .post(
                    "/sources",
                    &[
                        ("csrf", &csrf),
                        ("name", name),
                        ("dsn", &dsn),
                        ("privacy", "keep-values"),
                        ("refresh_secs", "0"),
                    ],
                )
                .await;
            assert_eq!(saved.location.as_deref(), Some("/sources"));
            let page = browser.get("/sources").await.html;
            assert!(page.contains(flash), "{page}");
            pages.push(page);
        }
        let page = &pages[1];
        let row = |name: &str| {
            page.split(&format!("id=\"source-{name}\""))
                .nth(1)
                .expect("the row")
                .split("</tr>")
                .next()
                .expect("row end")
                .to_owned()
        };
        let weak = row("weak");
        assert!(
            weak.contains("require") && weak.contains("unverified"),
            "{weak}"
        );
        assert!(weak.contains("class=\"small tls-warning\""), "{weak}");
        let strict = row("strict");
        assert!(
            strict.contains("verify-full") && strict.contains("verified"),
            "{strict}"
        );
        assert!(
            strict.contains("the default for a host that is not loopback"),
            "{strict}"
        );
        assert!(!strict.contains("tls-warning"), "{strict}");
        for page in &pages {
            assert!(!page.contains(password), "the DSN's password on a page");
        }
    })
    .await;
}

#[tokio::test]
async fn the_sandbox_card_greys_out_an_engine_the_backend_cannot_run_and_refuses_it() {
    // This host has no mongod: the process backend runs PostgreSQL, Redis and MariaDB only.
    app()
        .await
        .run(|app| async move {
            let browser = Browser::new(&app);
            let csrf = browser.login().await;
            let slug = unique("nosql");
            browser
                .post("/projects", &[("csrf", &csrf), ("slug", &slug)])
                .await;
            let project = ProjectSlug::parse(&slug).expect("slug");
            let card = browser.get(&format!("/projects/{slug}")).await.html;
            assert!(card.contains("id=\"service-mongo\" disabled"), "{card}");
            assert!(card.contains("id=\"unrunnable-mongo\""), "{card}");
            assert!(
                card.contains("the process backend cannot run mongo"),
                "the reason is shown: {card}"
            );
            for runs in ["postgres", "redis", "mariadb"] {
                assert!(
                    !card.contains(&format!("id=\"service-{runs}\" disabled")),
                    "{runs}: {card}"
                );
                assert!(
                    !card.contains(&format!("id=\"unrunnable-{runs}\"")),
                    "{runs}"
                );
            }

            // A form that sends it anyway (no browser greys anything for a script) is refused.
            let page = browser
                .post(
                    &format!("/projects/{slug}"),
                    &[
                        ("csrf", &csrf),
                        ("service", "postgres"),
                        ("service", "mongo"),
                    ],
                )
                .await;
            assert_eq!(page.status, StatusCode::SEE_OTHER);
            let card = browser.get(&format!("/projects/{slug}")).await.html;
            assert!(card.contains("Not saved"), "{card}");
            assert!(
                card.contains("runnable here: postgres, redis, mariadb"),
                "{card}"
            );
            assert_eq!(app.stored_project(&project).await.sandbox_services, None);
        })
        .await;
}
