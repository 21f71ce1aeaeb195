//! The Pools page's form that adds a pool, over plain HTTP as a browser without JavaScript
//! sends it: the session's CSRF token required, refused input naming what is allowed, and the
//! pool stored, so a restarted broker has it again. (The pools' task is not started here: the
//! pools stay empty, no instance is made.)

use std::collections::BTreeMap;

use reqwest::{Method, StatusCode};
use sandboxd_broker::PoolView;

use crate::support::{ADMIN_TOKEN, App, app};

/// A browser's cookie jar and the session's CSRF token.
struct Session<'a> {
    app: &'a App,
    cookies: BTreeMap<String, String>,
    csrf: String,
}

impl<'a> Session<'a> {
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        form: &[(&str, &str)],
    ) -> (StatusCode, String) {
        let mut request = self.app.anonymous(method.clone(), path);
        if !self.cookies.is_empty() {
            let cookie: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            request = request.header("cookie", cookie.join("; "));
        }
        if method == Method::POST {
            request = request.form(form);
        }
        let response = request.send().await.expect("request");
        for set in response.headers().get_all("set-cookie") {
            let set = set.to_str().expect("ascii");
            let (name, value) = set
                .split(';')
                .next()
                .and_then(|p| p.split_once('='))
                .expect("a cookie");
            self.cookies.insert(name.to_owned(), value.to_owned());
        }
        (response.status(), response.text().await.expect("body"))
    }

    async fn login(app: &'a App) -> Self {
        let mut session = Self {
            app,
            cookies: BTreeMap::new(),
            csrf: String::new(),
        };
        let (_, page) = session.send(Method::GET, "/login", &[]).await;
        let csrf = hidden(&page, "csrf");
        let (status, _) = session
            .send(
                Method::POST,
                "/login",
                &[("csrf", &csrf), ("token", ADMIN_TOKEN)],
            )
            .await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let (_, page) = session.send(Method::GET, "/pools", &[]).await;
        session.csrf = hidden(&page, "csrf");
        session
    }

    /// Posts the add form; returns the status and the pools page shown after it (its flash).
    async fn add(&mut self, csrf: &str, fields: &[(&str, &str)]) -> (StatusCode, String) {
        let mut form = vec![("csrf", csrf)];
        form.extend_from_slice(fields);
        let (status, _) = self.send(Method::POST, "/pools", &form).await;
        let (_, page) = self.send(Method::GET, "/pools", &[]).await;
        (status, page)
    }
}

fn hidden(html: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {name} in {html}"))
        + marker.len();
    html[start..].split('"').next().expect("value").to_owned()
}

fn sizes(pools: &[PoolView], name: &str) -> Option<(usize, usize)> {
    pools
        .iter()
        .find(|p| p.key.to_string() == name)
        .map(|p| (p.min_idle, p.max_total))
}

#[tokio::test]
async fn the_pools_page_adds_a_stored_pool_behind_its_csrf_token() {
    app()
        .await
        .run(|app| async move {
            let mut session = Session::login(&app).await;
            let (_, page) = session.send(Method::GET, "/pools", &[]).await;
            assert!(page.contains("id=\"no-pools\""), "{page}");
            assert!(page.contains("action=\"/pools\""), "{page}");
            for engine in sandboxd_domain::engines::all() {
                assert!(
                    page.contains(&format!("<option value=\"{}\"", engine.name)),
                    "{page}"
                );
            }

            // A forged token changes nothing.
            let (status, _) = session
                .add(&"f".repeat(64), &[("engine", "redis"), ("min_idle", "1")])
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN);
            assert!(app.broker().pools().is_empty());

            // Refused input says what is allowed and adds nothing.
            let csrf = session.csrf.clone();
            let (_, page) = session
                .add(&csrf, &[("engine", "nosuch"), ("min_idle", "1")])
                .await;
            assert!(
                page.contains("postgres") && page.contains("nothing changed"),
                "{page}"
            );
            let (_, page) = session
                .add(
                    &csrf,
                    &[("engine", "redis"), ("min_idle", "3"), ("max_total", "2")],
                )
                .await;
            assert!(page.contains("must not exceed max_total"), "{page}");
            assert!(app.broker().pools().is_empty());

            // Added with a min idle alone: the ceiling is 4.
            let (status, page) = session
                .add(
                    &csrf,
                    &[("engine", "redis"), ("min_idle", "1"), ("max_total", "")],
                )
                .await;
            assert_eq!(status, StatusCode::SEE_OTHER);
            assert!(page.contains("The redis pool was added"), "{page}");
            assert!(page.contains("id=\"pool-redis\""), "{page}");
            assert_eq!(sizes(&app.broker().pools(), "redis"), Some((1, 4)));

            // Stored: a restarted broker has it again.
            app.restart().await;
            assert_eq!(sizes(&app.broker().pools(), "redis"), Some((1, 4)));
        })
        .await;
}
