//! Paging: pages of at most 1,000, `top`, continuation tokens (also through their
//! text form), empty pages under a small scan budget, `query_all` and `count`.

use std::collections::HashSet;
use std::ops::Bound::{Excluded, Included, Unbounded};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use tablesql::storage::{CmpOp, ContinuationToken, Filter, IfMatch, InvalidInput, Page, WriteOp};

use super::*;

/// `n` entities of one partition, rows zero-padded to 5 digits, property I = index.
fn numbered(p: &str, n: usize) -> Vec<Entity> {
    (0..n)
        .map(|i| entity(p, &format!("{i:05}"), &[("I", int(i as i32))]))
        .collect()
}

/// Every page of a query, following tokens.
async fn pages(s: &dyn TableStore, t: &TableName, q: &Query) -> TestResult<Vec<Page>> {
    let mut out: Vec<Page> = Vec::new();
    loop {
        let token = out.last().and_then(|p| p.continuation.clone());
        if !out.is_empty() && token.is_none() {
            return Ok(out);
        }
        assert!(out.len() < 10_000, "the query never ends");
        out.push(s.query(t, q, token.as_ref()).await?);
    }
}

/// The page sizes, and whether each page carries a token.
fn shape(pages: &[Page]) -> Vec<(usize, bool)> {
    pages
        .iter()
        .map(|p| (p.entities.len(), p.continuation.is_some()))
        .collect()
}

/// All entities of all pages, checked to be in key order without duplicates.
fn concat(pages: &[Page]) -> Vec<StoredEntity> {
    let all: Vec<StoredEntity> = pages.iter().flat_map(|p| p.entities.clone()).collect();
    let unique: HashSet<_> = keys(&all).into_iter().collect();
    assert_eq!(unique.len(), all.len(), "an entity came back twice");
    all
}

fn expected_keys(entities: &[Entity]) -> Vec<(String, String)> {
    entities
        .iter()
        .map(|e| {
            (
                e.partition_key.as_str().to_owned(),
                e.row_key.as_str().to_owned(),
            )
        })
        .collect()
}

pub async fn pages_of_a_thousand(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Paged").await?;
    let all_rows = numbered("p", 2500);
    seed(s, &t, all_rows.clone()).await?;
    for q in [Query::all(), Query::partition(pk("p"))] {
        let got = pages(s, &t, &q).await?;
        assert_eq!(shape(&got), [(1000, true), (1000, true), (500, false)]);
        let token = got[0]
            .continuation
            .as_ref()
            .ok_or("first page has a token")?;
        assert_eq!(
            (
                token.next_partition_key.as_str(),
                token.next_row_key.as_str()
            ),
            ("p", "01000")
        );
        let found = concat(&got);
        assert_eq!(keys(&found), expected_keys(&all_rows), "no gaps, key order");
        assert!(
            found
                .iter()
                .enumerate()
                .all(|(i, e)| e.get("I") == Some(&int(i as i32)))
        );
    }
    Ok(())
}

pub async fn top_seven_pages(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Paged").await?;
    let rows = numbered("p", 50);
    seed(s, &t, rows.clone()).await?;
    let got = pages(s, &t, &Query::all().top(7)).await?;
    let mut want = vec![(7, true); 7];
    want.push((1, false));
    assert_eq!(shape(&got), want);
    assert_eq!(keys(&concat(&got)), expected_keys(&rows));
    Ok(())
}

pub async fn resume_from_token_text(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Paged").await?;
    seed(s, &t, numbered("p", 25)).await?;
    let q = Query::all().top(10);
    let first = s.query(&t, &q, None).await?;
    let token = first.continuation.ok_or("top(10) of 25 continues")?;
    let text = token.to_string();
    assert!(
        text.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
        "URL-safe: {text}"
    );
    let parsed: ContinuationToken = text.parse()?;
    assert_eq!(parsed, token);
    let by_text = s.query(&t, &q, Some(&parsed)).await?;
    let by_value = s.query(&t, &q, Some(&token)).await?;
    assert_eq!(by_text, by_value);
    assert_eq!(
        row_keys(&by_text.entities),
        (10..20).map(|i| format!("{i:05}")).collect::<Vec<_>>()
    );
    // Tokens for unusual keys survive their text form too.
    for (p, r) in [("", ""), ("\u{10000}é", "a b\u{FFFF}"), ("p", "")] {
        let t = ContinuationToken::at(pk(p), rk(r));
        assert_eq!(t.to_string().parse::<ContinuationToken>()?, t);
    }
    // A token at the very start resumes at the very start.
    let start = ContinuationToken::at(pk(""), rk(""));
    assert_eq!(
        s.query(&t, &q, Some(&start)).await?,
        s.query(&t, &q, None).await?
    );
    Ok(())
}

pub async fn malformed_token_fails_to_parse(fx: &Fixture) -> TestResult {
    let _ = fx;
    let encoded = |raw: &str| URL_SAFE_NO_PAD.encode(raw);
    let bad = [
        "garbage!".to_owned(),
        "not base64 at all".to_owned(),
        "=".to_owned(),
        encoded("2:p\u{0}r"),                                // unknown version
        encoded("1:no separator"),                           // no NUL between the keys
        encoded("p\u{0}r"),                                  // no version
        encoded("1:a/b\u{0}r"),                              // a character keys may not hold
        URL_SAFE_NO_PAD.encode([b'1', b':', 0xFF, 0, b'r']), // not UTF-8
    ];
    for text in bad {
        assert_matches!(
            text.parse::<ContinuationToken>(),
            Err(InvalidInput::ContinuationToken)
        );
    }
    Ok(())
}

pub async fn pages_across_partitions(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Paged").await?;
    let mut rows = Vec::new();
    for p in ["p1", "p2", "p3"] {
        let part = numbered(p, 400);
        seed(s, &t, part.clone()).await?;
        rows.extend(part);
    }
    let got = pages(s, &t, &Query::all()).await?;
    assert_eq!(shape(&got), [(1000, true), (200, false)]);
    let token = got[0].continuation.as_ref().ok_or("token")?;
    assert_eq!(
        (
            token.next_partition_key.as_str(),
            token.next_row_key.as_str()
        ),
        ("p3", "00200")
    );
    assert_eq!(keys(&concat(&got)), expected_keys(&rows));
    // A partition range with a small page size crosses partition boundaries exactly.
    let q = Query {
        partitions: range(Included("p2"), Included("p3"), pk),
        ..Query::all()
    }
    .top(300);
    let got = pages(s, &t, &q).await?;
    assert_eq!(shape(&got), [(300, true), (300, true), (200, false)]);
    assert_eq!(keys(&concat(&got)), expected_keys(&rows[400..]));
    Ok(())
}

pub async fn empty_pages_with_tokens_under_small_scan_budget(fx: &Fixture) -> TestResult {
    let hits = [5, 57, 58, 95];
    let rows: Vec<Entity> = (0..100)
        .map(|i| {
            entity(
                "p",
                &format!("{i:03}"),
                &[("Hit", EdmValue::Boolean(hits.contains(&i)))],
            )
        })
        .collect();
    let want: Vec<String> = hits.iter().map(|i| format!("{i:03}")).collect();
    let q = Query::all().filter(Filter::property("Hit", CmpOp::Eq, EdmValue::Boolean(true)));
    // With the default budget the selective query is one page.
    let t = table(fx.store(), "Sparse").await?;
    seed(fx.store(), &t, rows.clone()).await?;
    let got = pages(fx.store(), &t, &q).await?;
    assert_eq!(shape(&got), [(4, false)]);
    // A store that examines at most 10 entities per page answers with what it has.
    let small = fx.with_scan_budget(10)?;
    let s = small.store();
    let t = table(s, "Sparse").await?;
    seed(s, &t, rows).await?;
    let got = pages(s, &t, &q).await?;
    assert!(
        got.len() >= 10,
        "100 entities at 10 per page: {:?}",
        shape(&got)
    );
    assert!(
        got.iter()
            .any(|p| p.entities.is_empty() && p.continuation.is_some()),
        "an empty page with a token"
    );
    assert!(got.iter().all(|p| p.entities.len() <= 10));
    assert_eq!(row_keys(&concat(&got)), want);
    assert_eq!(row_keys(&s.query_all(&t, &q).await?), want);
    assert_eq!(s.count(&t).await?, 100);
    Ok(())
}

pub async fn small_scan_budget_with_row_range_and_top(fx: &Fixture) -> TestResult {
    let small = fx.with_scan_budget(3)?;
    let s = small.store();
    let t = table(s, "Ranged").await?;
    for p in ["a", "b", "c"] {
        seed(
            s,
            &t,
            (0..10).map(|i| entity(p, &i.to_string(), &[])).collect(),
        )
        .await?;
    }
    let q = Query::all()
        .rows(range(Included("3"), Included("5"), rk))
        .top(2);
    let got = pages(s, &t, &q).await?;
    assert!(got.iter().all(|p| p.entities.len() <= 2));
    let want = ["a", "b", "c"]
        .iter()
        .flat_map(|p| ["3", "4", "5"].map(|r| (*p, r)))
        .collect::<Vec<_>>();
    assert_eq!(keys(&concat(&got)), pairs(&want));
    Ok(())
}

/// A page filled by the last entities of its range ends the query: no
/// token to a page that could only come back empty. A point read by a
/// RowKey prefix (`top` 1) is such a page. Across partitions a full page
/// has a token, and following it gives the rest (where the token points
/// is the store's: the local stores name the next stored row, Azure what
/// it names).
pub async fn a_page_that_ends_with_its_range_has_no_token(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Ending").await?;
    for p in ["a", "b"] {
        seed(s, &t, numbered(p, 30)).await?;
    }
    let ten = Query::partition(pk("a"))
        .rows(range(Included("00010"), Included("00019"), rk))
        .top(10);
    let page = s.query(&t, &ten, None).await?;
    assert_eq!(page.entities.len(), 10);
    assert_eq!(page.continuation, None);
    let point = Query::partition(pk("a"))
        .rows(range(Included("00012"), Excluded("00013"), rk))
        .top(1);
    let page = s.query(&t, &point, None).await?;
    assert_eq!(row_keys(&page.entities), ["00012"]);
    assert_eq!(page.continuation, None);
    // Over partitions a full page has a token, whatever row it names.
    let across = Query::all()
        .rows(range(Included("00028"), Unbounded, rk))
        .top(2);
    let first = s.query(&t, &across, None).await?;
    assert_eq!(
        keys(&first.entities),
        pairs(&[("a", "00028"), ("a", "00029")])
    );
    let token = first.continuation.ok_or("partition b is still to come")?;
    let second = s.query(&t, &across, Some(&token)).await?;
    assert_eq!(
        keys(&second.entities),
        pairs(&[("b", "00028"), ("b", "00029")])
    );
    assert_eq!(second.continuation, None);
    Ok(())
}

pub async fn token_survives_deletion_of_named_entity(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Moving").await?;
    seed(
        s,
        &t,
        (0..10)
            .map(|i| entity("p", &format!("{i:02}"), &[]))
            .collect(),
    )
    .await?;
    let q = Query::all().top(4);
    let first = s.query(&t, &q, None).await?;
    assert_eq!(row_keys(&first.entities), ["00", "01", "02", "03"]);
    let token = first.continuation.ok_or("token")?;
    // Change the table between pages: the token is a key position, not a cursor.
    s.execute(
        &t,
        WriteOp::Delete {
            partition_key: pk("p"),
            row_key: rk("04"),
            if_match: IfMatch::Any,
        },
    )
    .await?;
    insert(s, &t, entity("p", "035", &[])).await?;
    insert(s, &t, entity("p", "045", &[])).await?;
    let second = s.query(&t, &q, Some(&token)).await?;
    assert_eq!(row_keys(&second.entities), ["045", "05", "06", "07"]);
    let third = s.query(&t, &q, second.continuation.as_ref()).await?;
    assert_eq!(row_keys(&third.entities), ["08", "09"]);
    assert_eq!(third.continuation, None);
    Ok(())
}

pub async fn query_all_and_count(fx: &Fixture) -> TestResult {
    let s = fx.store();
    let t = table(s, "Counted").await?;
    assert_eq!(s.count(&t).await?, 0);
    assert!(s.query_all(&t, &Query::all()).await?.is_empty());
    let mut rows = numbered("a", 1234);
    rows.extend(numbered("b", 766));
    seed(s, &t, rows[..1234].to_vec()).await?;
    seed(s, &t, rows[1234..].to_vec()).await?;
    assert_eq!(s.count(&t).await?, 2000);
    let found = s.query_all(&t, &Query::all()).await?;
    assert_eq!(keys(&found), expected_keys(&rows));
    // `top` sets the page size only; query_all still returns everything.
    assert_eq!(s.query_all(&t, &Query::all().top(333)).await?.len(), 2000);
    let q = Query::all().filter(Filter::property("I", CmpOp::Lt, int(10)));
    assert_eq!(s.query_all(&t, &q).await?.len(), 20);
    // count is a full scan that projects nothing; a partition query counts one.
    assert_eq!(
        s.query_all(&t, &Query::partition(pk("b")).select(Vec::<String>::new()))
            .await?
            .len(),
        766
    );
    Ok(())
}

/// What a sink saw of one entity: keys, ETag, and the named properties,
/// read both through `select` and through `property`.
type Lent = (
    String,
    String,
    tablesql::storage::ETag,
    Vec<Option<EdmValue>>,
);

struct Collect {
    names: Vec<String>,
    rows: Vec<Lent>,
}

impl tablesql::storage::RowSink for Collect {
    fn push(&mut self, e: &dyn tablesql::storage::EntityView) -> std::ops::ControlFlow<()> {
        let mut selected = vec![None; self.names.len()];
        e.select(&self.names, &mut |i, v| {
            selected[i] = Some(v.to_owned_value())
        });
        let one_by_one: Vec<_> = self
            .names
            .iter()
            .map(|n| e.property(n).map(|v| v.to_owned_value()))
            .collect();
        assert_eq!(selected, one_by_one, "select and property disagree");
        self.rows.push((
            e.partition_key().to_owned(),
            e.row_key().to_owned(),
            e.etag(),
            selected,
        ));
        std::ops::ControlFlow::Continue(())
    }
}

/// `query_into` lends, page by page, exactly the entities `query` returns,
/// with the same tokens and `scanned` counts: over ranges with excluded
/// bounds, a filter, `top`, and a scan budget that leaves pages empty.
pub async fn pages_into_a_sink_match_the_pages(fx: &Fixture) -> TestResult {
    let small = fx.with_scan_budget(10)?;
    for fixture in [fx, &small] {
        let s = fixture.store();
        let t = table(s, "Lent").await?;
        for (p, n) in [("a", 1500), ("b", 30), ("c", 3)] {
            seed(s, &t, numbered(p, n)).await?;
        }
        let names = vec!["I".to_owned(), "Missing".to_owned()];
        let queries = [
            Query::all(),
            Query::all().select(["I"]),
            Query::all().top(7),
            Query::all()
                .filter(Filter::property("I", CmpOp::Ge, int(1495)))
                .select(["I"]),
            Query {
                partitions: range(Bound::Excluded("a"), Bound::Included("c"), pk),
                rows: range(Bound::Excluded("00001"), Bound::Excluded("00025"), rk),
                ..Query::all()
            },
        ];
        for q in &queries {
            let mut token: Option<ContinuationToken> = None;
            let mut n = 0;
            loop {
                n += 1;
                assert!(n < 10_000, "the query never ends");
                let page = s.query(&t, q, token.as_ref()).await?;
                let sink = Arc::new(std::sync::Mutex::new(Collect {
                    names: names.clone(),
                    rows: Vec::new(),
                }));
                let shared: Arc<std::sync::Mutex<dyn tablesql::storage::RowSink>> = sink.clone();
                let end = s.query_into(&t, q, token.as_ref(), shared).await?;
                let want: Vec<Lent> = page
                    .entities
                    .iter()
                    .map(|e| {
                        (
                            e.partition_key().as_str().to_owned(),
                            e.row_key().as_str().to_owned(),
                            e.etag.clone(),
                            names.iter().map(|n| e.get(n).cloned()).collect(),
                        )
                    })
                    .collect();
                let got = std::mem::take(&mut sink.lock().expect("sink").rows);
                assert_eq!(got, want, "{q:?}");
                assert_eq!(end.continuation, page.continuation, "{q:?}");
                assert_eq!(end.scanned, page.scanned, "{q:?}");
                assert_eq!(end.returned, page.entities.len(), "{q:?}");
                match page.continuation {
                    Some(next) => token = Some(next),
                    None => break,
                }
            }
        }
    }
    Ok(())
}
