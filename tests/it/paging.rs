//! Token paging: for random mapped tables, data and predicates, paging a
//! query with random page sizes, each page in a new engine (as a stateless
//! service resumes in another process), returns exactly the rows of the
//! query run whole, none twice and none missing, on the memory, embedded and
//! Azure (Azurite) stores; and every bad token is refused.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use proptest::prelude::*;
use tablesql::Engine;
use tablesql::EngineError;
use tablesql::ExecError;
use tablesql::TokenError;
use tablesql::storage::*;

use crate::fanout::{azurite_case, options, run, setup};
use crate::pushdown::Row;

/// Each row as one line, sorted.
fn lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    let options = FormatOptions::default().with_null("NULL");
    for b in batches {
        let formatters: Vec<_> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap())
            .collect();
        for row in 0..b.num_rows() {
            let cells: Vec<String> = formatters
                .iter()
                .map(|f| f.value(row).to_string())
                .collect();
            out.push(cells.join("|"));
        }
    }
    out.sort();
    out
}

async fn check(
    store: Arc<dyn TableStore>,
    storage_table: &str,
    case: Case,
) -> Result<(), TestCaseError> {
    let ((shape, rows, pred, width, _), sizes, analyze) = case;
    let name = setup(&store, storage_table, shape, &rows).await;
    let sql = format!("SELECT a, b, c, d, v, w FROM {name} WHERE {pred}");
    let whole = Engine::with_store(store.clone(), options(false, 1))
        .await
        .unwrap()
        .session();
    // Pages fanned out by statistics: chunks of partitions between guideposts.
    if let Some(every) = analyze {
        whole.analyze(&name, every).await.unwrap();
    }
    let want = lines(&whole.collect(&sql).await.unwrap());
    let mut got = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        // A new engine per page: the token alone carries the position.
        let engine = Engine::with_store(store.clone(), options(true, width))
            .await
            .unwrap()
            .session();
        let size = sizes[pages % sizes.len()];
        let page = engine
            .query_page(&sql, size, token.as_deref())
            .await
            .map_err(|e| TestCaseError::fail(format!("page {pages}: {e}")))?;
        let n: usize = page.batches.iter().map(RecordBatch::num_rows).sum();
        prop_assert!(
            n <= size,
            "page {} has {} rows, more than {}",
            pages,
            n,
            size
        );
        got.extend(lines(&page.batches));
        pages += 1;
        match page.next {
            Some(next) => {
                prop_assert_eq!(n, size, "a page before the last is full");
                token = Some(next);
            }
            None => break,
        }
        prop_assert!(pages <= want.len() + 1, "more pages than rows: {}", sql);
    }
    got.sort();
    prop_assert_eq!(got, want, "{}", sql);
    Ok(())
}

/// The fan-out test's cases, with the page sizes to cycle through, and
/// the guidepost step of an ANALYZE before paging, if any.
type Case = (
    (usize, Vec<Row>, String, usize, usize),
    Vec<usize>,
    Option<u64>,
);

fn case() -> impl Strategy<Value = Case> {
    (
        crate::fanout::case(),
        prop::collection::vec(1usize..8, 1..4),
        prop::option::of(1u64..6),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn pages_resumed_in_new_engines_return_every_row_once_memory(
        case in case()
    ) {
        let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new().with_scan_budget(case.0.4));
        run(check(store, "Things", case))?;
    }

    #[test]
    fn pages_resumed_in_new_engines_return_every_row_once_embedded(
        case in case()
    ) {
        let store: Arc<dyn TableStore> =
            Arc::new(EmbeddedStore::in_memory().unwrap().with_scan_budget(case.0.4));
        run(check(store, "Things", case))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, ..ProptestConfig::default() })]

    #[test]
    fn pages_resumed_in_new_engines_return_every_row_once_azurite(
        case in case()
    ) {
        let (store, name) = azurite_case("Pages", case.0.4)?;
        run(check(store, &name, case))?;
    }
}

fn token_error(e: EngineError) -> TokenError {
    let EngineError::DataFusion(d) = &e else {
        panic!("not a token error: {e}");
    };
    let inner = d.find_root();
    match inner {
        datafusion::error::DataFusionError::External(x) => match x.downcast_ref::<ExecError>() {
            Some(ExecError::Token(t)) => t.clone(),
            _ => panic!("not a token error: {e}"),
        },
        _ => panic!("not a token error: {e}"),
    }
}

/// Tampered, truncated, of another statement, of another store: each is
/// refused with its own error, never read as a position.
#[tokio::test]
async fn bad_tokens_are_refused() {
    let insert = "INSERT INTO things (a, b, c, d) VALUES \
        ('x', 1, 1, 'p'), ('x', 2, 2, 'q'), ('y', 3, 3, 'p'), ('y', 4, 4, 'q'), ('z', 5, 5, 'p')";
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let name = setup(&store, "Things", 0, &[]).await;
    let engine = Engine::with_store(store.clone(), options(true, 4))
        .await
        .unwrap()
        .session();
    engine.collect(insert).await.unwrap();
    let sql = format!("SELECT a, b FROM {name}");
    let first = engine.query_page(&sql, 3, None).await.unwrap();
    let token = first.next.expect("more than one page");

    let mut tampered = token.clone().into_bytes();
    let i = tampered.len() / 2;
    tampered[i] = if tampered[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    let e = engine
        .query_page(&sql, 3, Some(&tampered))
        .await
        .unwrap_err();
    assert_eq!(token_error(e), TokenError::Altered);

    let e = engine
        .query_page(&sql, 3, Some(&token[..token.len() - 5]))
        .await
        .unwrap_err();
    assert!(matches!(token_error(e), TokenError::Malformed(_)));

    let other = format!("SELECT a, b FROM {name} WHERE b > 1");
    let e = engine
        .query_page(&other, 3, Some(&token))
        .await
        .unwrap_err();
    assert_eq!(token_error(e), TokenError::OtherStatement);

    // Another store, with the same table and rows: its own secret.
    let elsewhere: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    setup(&elsewhere, "Things", 0, &[]).await;
    let foreign = Engine::with_store(elsewhere, options(true, 4))
        .await
        .unwrap()
        .session();
    foreign.collect(insert).await.unwrap();
    let e = foreign.query_page(&sql, 3, Some(&token)).await.unwrap_err();
    assert_eq!(token_error(e), TokenError::OtherStore);

    // What cannot page says why.
    let e = engine
        .query_page(&format!("SELECT count(*) FROM {name}"), 3, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("an aggregate"), "{e}");
}

/// Paging in a session (the shell's and the wire's way): the token waits
/// through statements that do not page, and a query folding `now()` into
/// its plan still resumes.
#[tokio::test]
async fn session_tokens_survive_other_statements() {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let name = setup(&store, "Things", 0, &[]).await;
    let engine = Engine::with_store(store, options(true, 4))
        .await
        .unwrap()
        .session();
    engine
        .collect(
            "INSERT INTO things (a, b, c, d) VALUES ('x', 1, 1, 'p'), ('x', 2, 2, 'q'), \
             ('y', 3, 3, 'p'), ('y', 4, 4, 'q'), ('z', 5, 5, 'p')",
        )
        .await
        .unwrap();
    let text = |b: &[RecordBatch]| lines(b).join(",");
    let sql = format!("SELECT b FROM {name} WHERE \"Timestamp\" < now() + INTERVAL '1 hour'");
    engine.collect("SET tablesql.page_size = 2").await.unwrap();
    assert_eq!(text(&engine.collect(&sql).await.unwrap()), "1,2");
    let show = engine
        .collect("SHOW tablesql.next_page_token")
        .await
        .unwrap();
    let token = lines(&show).join("");
    let token = token.rsplit('|').next().unwrap_or_default().to_owned();
    assert!(!token.is_empty());
    engine
        .collect(&format!("SET tablesql.page_token = '{token}'"))
        .await
        .unwrap();
    // Statements that do not page leave the token where it is.
    engine.collect("SHOW tablesql.page_token").await.unwrap();
    engine
        .collect(&format!("SELECT count(*) FROM {name}"))
        .await
        .unwrap();
    assert_eq!(text(&engine.collect(&sql).await.unwrap()), "3,4");
    // The token was taken: the same query starts over.
    assert_eq!(text(&engine.collect(&sql).await.unwrap()), "1,2");
    // The library's pages of the same query resume too, `now()` and all.
    let first = engine.query_page(&sql, 2, None).await.unwrap();
    let next = engine
        .query_page(&sql, 2, first.next.as_deref())
        .await
        .unwrap();
    assert_eq!(text(&next.batches), "3,4");
}

/// Pages of a table whose typed text keys hold characters past U+FFFF,
/// which UTF-16 (the keys' order) puts below U+E000..U+FFFF: page by page,
/// one row a page, every row once, in key order, as a page resumes after
/// its last key.
#[tokio::test]
async fn text_keys_past_u_ffff_page_every_row_once() {
    let store: Arc<dyn TableStore> = Arc::new(MemoryStore::new());
    let engine = Engine::with_store(store, options(true, 4))
        .await
        .unwrap()
        .session();
    engine
        .collect(
            "CREATE TABLE glyphs (p INT NOT NULL, k TEXT NOT NULL, n INT, PRIMARY KEY (p, k)) \
             WITH (storage_table = 'Glyphs', partition_key = '{p:i10}', row_key = '{k:s}')",
        )
        .await
        .unwrap();
    engine
        .collect(
            "INSERT INTO glyphs VALUES (1, 'a', 1), (1, 'a' || chr(57344), 2), \
             (1, 'a' || chr(128512), 3), (1, 'b' || chr(65536), 4), (1, 'b' || chr(65532), 5)",
        )
        .await
        .unwrap();
    let sql = "SELECT k, n FROM glyphs WHERE p = 1";
    let mut token: Option<String> = None;
    let mut got = Vec::new();
    for _ in 0..10 {
        let page = engine.query_page(sql, 1, token.as_deref()).await.unwrap();
        for b in &page.batches {
            let n = b
                .column(1)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::Int32Array>();
            got.extend(n.iter().flat_map(|a| a.iter().flatten()));
        }
        match page.next {
            Some(next) => token = Some(next),
            None => break,
        }
    }
    // UTF-16 order: U+1F600 (D83D) before U+E000, U+10000 (D800) before U+FFFC.
    assert_eq!(got, [1, 3, 2, 4, 5]);
}
