//! Model-based property test: random sequences of operations run against the
//! embedded store and the memory oracle; every answer must be the same.

use std::ops::Bound;

use proptest::prelude::*;
use tablesql::storage::*;

const PKS: [&str; 6] = ["", "a", "ab", "2", "\u{E000}", "\u{10000}"];
const RKS: [&str; 6] = ["", "111", "2", "b", "\u{FFFF}", "\u{10000}x"];
const NAMES: [&str; 3] = ["n", "s", "Age"];

#[derive(Debug, Clone, Copy)]
enum Kind {
    Insert,
    Update,
    Merge,
    Delete,
    InsertOrReplace,
    InsertOrMerge,
}

#[derive(Debug, Clone, Copy)]
enum Tag {
    Any,
    Current,
    Stale,
}

#[derive(Debug, Clone)]
struct OpSpec {
    kind: Kind,
    pk: usize,
    rk: usize,
    props: Vec<(usize, EdmValue)>,
    tag: Tag,
}

#[derive(Debug, Clone)]
enum Step {
    Write(OpSpec),
    Batch(Vec<OpSpec>),
    Get(usize, usize),
    Query {
        pks: (Bound<usize>, Bound<usize>),
        rks: (Bound<usize>, Bound<usize>),
        filter: Option<Filter>,
        select: Option<Vec<usize>>,
        top: Option<u32>,
    },
    RecreateTable,
}

fn value() -> impl Strategy<Value = EdmValue> {
    prop_oneof![
        (-3i32..3).prop_map(EdmValue::Int32),
        (-3i64..3).prop_map(EdmValue::Int64),
        prop::sample::select(vec!["", "a", "b", "\u{10000}"])
            .prop_map(|s| EdmValue::String(s.into())),
        prop::sample::select(vec![0.5, -1.0, f64::NAN]).prop_map(EdmValue::Double),
        any::<bool>().prop_map(EdmValue::Boolean),
    ]
}

fn op() -> impl Strategy<Value = OpSpec> {
    let kind = prop::sample::select(vec![
        Kind::Insert,
        Kind::Update,
        Kind::Merge,
        Kind::Delete,
        Kind::InsertOrReplace,
        Kind::InsertOrMerge,
    ]);
    let tag = prop::sample::select(vec![Tag::Any, Tag::Current, Tag::Stale]);
    (
        kind,
        0..PKS.len(),
        0..RKS.len(),
        prop::collection::vec((0..NAMES.len(), value()), 0..3),
        tag,
    )
        .prop_map(|(kind, pk, rk, props, tag)| OpSpec {
            kind,
            pk,
            rk,
            props,
            tag,
        })
}

fn bound(n: usize) -> impl Strategy<Value = Bound<usize>> {
    prop_oneof![
        Just(Bound::Unbounded),
        (0..n).prop_map(Bound::Included),
        (0..n).prop_map(Bound::Excluded)
    ]
}

fn filter() -> impl Strategy<Value = Filter> {
    let cmp = prop::sample::select(vec![
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Gt,
        CmpOp::Ge,
        CmpOp::Lt,
        CmpOp::Le,
    ]);
    let leaf =
        (0..NAMES.len(), cmp, value()).prop_map(|(n, op, v)| Filter::property(NAMES[n], op, v));
    leaf.prop_recursive(2, 6, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.and(b)),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a.or(b)),
            inner.prop_map(Filter::negate),
        ]
    })
}

fn step() -> impl Strategy<Value = Step> {
    let query = (
        (bound(PKS.len()), bound(PKS.len())),
        (bound(RKS.len()), bound(RKS.len())),
        prop::option::of(filter()),
        prop::option::of(prop::collection::vec(0..NAMES.len(), 0..2)),
        prop::option::of(1u32..4),
    )
        .prop_map(|(pks, rks, filter, select, top)| Step::Query {
            pks,
            rks,
            filter,
            select,
            top,
        });
    prop_oneof![
        6 => op().prop_map(Step::Write),
        3 => prop::collection::vec(op(), 1..5).prop_map(Step::Batch),
        2 => (0..PKS.len(), 0..RKS.len()).prop_map(|(p, r)| Step::Get(p, r)),
        3 => query,
        1 => Just(Step::RecreateTable),
    ]
}

fn pk(i: usize) -> PartitionKey {
    PartitionKey::new(PKS[i]).expect("valid key")
}

fn rk(i: usize) -> RowKey {
    RowKey::new(RKS[i]).expect("valid key")
}

fn keys<K: Clone>(b: &Bound<usize>, make: impl Fn(usize) -> K) -> Bound<K> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(i) => Bound::Included(make(*i)),
        Bound::Excluded(i) => Bound::Excluded(make(*i)),
    }
}

/// The operation as one store sees it: `Current` becomes that store's ETag.
async fn resolve(store: &dyn TableStore, table: &TableName, spec: &OpSpec) -> WriteOp {
    let if_match = match spec.tag {
        Tag::Any => IfMatch::Any,
        Tag::Stale => IfMatch::ETag(ETag::from_wire(
            "W/\"datetime'1999-01-01T00%3A00%3A00.0000000Z'\"",
        )),
        Tag::Current => match store.get(table, &pk(spec.pk), &rk(spec.rk)).await {
            Ok(Some(e)) => IfMatch::ETag(e.etag),
            _ => IfMatch::ETag(ETag::from_wire("W/\"none\"")),
        },
    };
    let mut entity = Entity::new(pk(spec.pk), rk(spec.rk));
    for (n, v) in &spec.props {
        entity.properties.insert(NAMES[*n].to_owned(), v.clone());
    }
    match spec.kind {
        Kind::Insert => WriteOp::Insert(entity),
        Kind::Update => WriteOp::Update(entity, if_match),
        Kind::Merge => WriteOp::Merge(entity, if_match),
        Kind::Delete => WriteOp::Delete {
            partition_key: entity.partition_key,
            row_key: entity.row_key,
            if_match,
        },
        Kind::InsertOrReplace => WriteOp::InsertOrReplace(entity),
        Kind::InsertOrMerge => WriteOp::InsertOrMerge(entity),
    }
}

/// What must agree between backends: everything but Timestamps and ETag values.
type Seen = Vec<String>;

fn shown(e: &StoredEntity) -> String {
    format!("{:?}", e.entity)
}

fn err(e: &StorageError) -> String {
    format!("error {e:?}")
}

async fn run(store: &dyn TableStore, steps: &[Step]) -> Seen {
    let table = TableName::new("Model").expect("valid name");
    let mut seen = Seen::new();
    store.create_table(&table).await.expect("create");
    for step in steps {
        let answer = match step {
            Step::Write(spec) => {
                let op = resolve(store, &table, spec).await;
                match store.execute(&table, op).await {
                    Ok(o) => format!("ok etag={}", o.etag.is_some()),
                    Err(e) => err(&e),
                }
            }
            Step::Batch(specs) => {
                let mut ops = Vec::new();
                for s in specs {
                    ops.push(resolve(store, &table, s).await);
                }
                match store.execute_batch(&table, ops).await {
                    Ok(o) => format!(
                        "ok {:?}",
                        o.iter().map(|o| o.etag.is_some()).collect::<Vec<_>>()
                    ),
                    Err(e) => err(&e),
                }
            }
            Step::Get(p, r) => match store.get(&table, &pk(*p), &rk(*r)).await {
                Ok(found) => format!("{:?}", found.as_ref().map(shown)),
                Err(e) => err(&e),
            },
            Step::Query {
                pks,
                rks,
                filter,
                select,
                top,
            } => {
                let query = Query {
                    partitions: KeyRange {
                        start: keys(&pks.0, pk),
                        end: keys(&pks.1, pk),
                    },
                    rows: KeyRange {
                        start: keys(&rks.0, rk),
                        end: keys(&rks.1, rk),
                    },
                    filter: filter.clone(),
                    select: select
                        .as_ref()
                        .map(|s| s.iter().map(|n| NAMES[*n].to_owned()).collect()),
                    top: *top,
                };
                let mut pages = Vec::new();
                let mut token = None;
                // Bounded: each page advances past at least one entity or ends.
                for _ in 0..200 {
                    match store.query(&table, &query, token.as_ref()).await {
                        Ok(page) => {
                            pages.push(format!(
                                "{:?} next={:?}",
                                page.entities.iter().map(shown).collect::<Vec<_>>(),
                                page.continuation.as_ref().map(ToString::to_string)
                            ));
                            token = page.continuation;
                            if token.is_none() {
                                break;
                            }
                        }
                        Err(e) => {
                            pages.push(err(&e));
                            break;
                        }
                    }
                }
                pages.join("; ")
            }
            Step::RecreateTable => {
                let deleted = store.delete_table(&table).await.map_err(|e| err(&e));
                let created = store.create_table(&table).await.map_err(|e| err(&e));
                format!("{deleted:?} {created:?}")
            }
        };
        seen.push(answer);
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn embedded_store_answers_like_the_memory_oracle(steps in prop::collection::vec(step(), 1..40)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (oracle, embedded) = rt.block_on(async {
            let memory = MemoryStore::new().with_scan_budget(3);
            let embedded = EmbeddedStore::in_memory().expect("open").with_scan_budget(3);
            (run(&memory, &steps).await, run(&embedded, &steps).await)
        });
        for (i, (want, got)) in oracle.iter().zip(&embedded).enumerate() {
            prop_assert_eq!(want, got, "step {}: {:?}", i, steps[i]);
        }
    }
}
