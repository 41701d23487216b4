//! Entities as the service's JSON (`odata=minimalmetadata`): every value whose
//! JSON form would lose its type carries an `@odata.type` annotation.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::entity::{ETag, Entity, Properties, StoredEntity};
use super::key::{PartitionKey, RowKey};
use super::value::{EdmType, EdmValue, format_datetime};

/// JSON the service sent that is not an entity as this model knows one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed entity JSON: {0}")]
pub struct DecodeError(pub String);

/// One property as JSON plus, where needed, its type annotation.
pub fn value_to_json(value: &EdmValue) -> (Value, Option<&'static str>) {
    let ty = Some(value.edm_type().odata_name());
    match value {
        EdmValue::String(s) => (Value::String(s.clone()), None),
        EdmValue::Boolean(b) => (Value::Bool(*b), None),
        EdmValue::Int32(i) => (Value::from(*i), None),
        // Int64 travels as a string: JSON numbers lose precision past 2^53.
        EdmValue::Int64(i) => (Value::String(i.to_string()), ty),
        EdmValue::Double(d) if d.is_finite() => (Value::from(*d), ty),
        EdmValue::Double(_) | EdmValue::Binary(_) | EdmValue::Guid(_) => {
            (Value::String(value.to_string()), ty)
        }
        EdmValue::DateTime(t) => (Value::String(format_datetime(t)), ty),
    }
}

/// A stored entity as a JSON object with its system properties first.
pub fn entity_to_json(e: &StoredEntity) -> Value {
    let mut obj = Map::new();
    obj.insert("odata.etag".into(), Value::String(e.etag.to_string()));
    obj.insert(
        "PartitionKey".into(),
        Value::String(e.partition_key().as_str().to_owned()),
    );
    obj.insert(
        "RowKey".into(),
        Value::String(e.row_key().as_str().to_owned()),
    );
    obj.insert(
        "Timestamp".into(),
        Value::String(format_datetime(&e.timestamp)),
    );
    insert_properties(&mut obj, &e.entity.properties);
    Value::Object(obj)
}

/// Adds custom properties, each with its type annotation where needed.
fn insert_properties(obj: &mut Map<String, Value>, properties: &Properties) {
    for (name, value) in properties {
        let (json, ty) = value_to_json(value);
        if let Some(ty) = ty {
            obj.insert(format!("{name}@odata.type"), Value::String(ty.to_owned()));
        }
        obj.insert(name.clone(), json);
    }
}

/// An entity as the body of a write: keys and properties, annotated.
pub fn entity_body(e: &Entity) -> Value {
    let mut obj = Map::new();
    obj.insert(
        "PartitionKey".into(),
        Value::String(e.partition_key.as_str().to_owned()),
    );
    obj.insert(
        "RowKey".into(),
        Value::String(e.row_key.as_str().to_owned()),
    );
    insert_properties(&mut obj, &e.properties);
    Value::Object(obj)
}

/// Decodes an entity of a query or point read (`odata=minimalmetadata`).
/// `etag` is the ETag header of a point read, used when the body has none.
pub fn entity_from_json(
    obj: &Map<String, Value>,
    etag: Option<&str>,
) -> Result<StoredEntity, DecodeError> {
    let text = |name: &str| match obj.get(name) {
        Some(Value::String(s)) => Ok(s.as_str()),
        _ => Err(DecodeError(format!("{name} is missing or not a string"))),
    };
    let partition_key =
        PartitionKey::new(text("PartitionKey")?).map_err(|e| DecodeError(e.to_string()))?;
    let row_key = RowKey::new(text("RowKey")?).map_err(|e| DecodeError(e.to_string()))?;
    let timestamp = parse_datetime(text("Timestamp")?)?;
    let etag = match (obj.get("odata.etag"), etag) {
        (Some(Value::String(s)), _) => ETag::from_wire(s.clone()),
        (_, Some(s)) => ETag::from_wire(s),
        _ => return Err(DecodeError("the entity has no ETag".into())),
    };
    let mut entity = Entity::new(partition_key, row_key);
    read_properties(obj, &mut entity)?;
    Ok(StoredEntity {
        entity,
        timestamp,
        etag,
    })
}

/// An entity from the body of a write ([`entity_body`]'s form).
pub fn entity_from_body(obj: &Map<String, Value>) -> Result<Entity, DecodeError> {
    let text = |name: &str| match obj.get(name) {
        Some(Value::String(s)) => Ok(s.as_str()),
        _ => Err(DecodeError(format!("{name} is missing or not a string"))),
    };
    let partition_key =
        PartitionKey::new(text("PartitionKey")?).map_err(|e| DecodeError(e.to_string()))?;
    let row_key = RowKey::new(text("RowKey")?).map_err(|e| DecodeError(e.to_string()))?;
    let mut entity = Entity::new(partition_key, row_key);
    read_properties(obj, &mut entity)?;
    Ok(entity)
}

/// The custom properties of an entity's JSON, annotations read.
fn read_properties(obj: &Map<String, Value>, entity: &mut Entity) -> Result<(), DecodeError> {
    for (name, json) in obj {
        // A null is a property the entity lacks (a `$select`ed name, on Azure).
        if json.is_null()
            || name.starts_with("odata.")
            || name.contains('@')
            || matches!(name.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
        {
            continue;
        }
        let annotation = match obj.get(&format!("{name}@odata.type")) {
            Some(Value::String(t)) => Some(t.as_str()),
            Some(_) => return Err(DecodeError(format!("{name}@odata.type is not a string"))),
            None => None,
        };
        let value = value_from_json(json, annotation)
            .map_err(|why| DecodeError(format!("property {name:?}: {why}")))?;
        entity.properties.insert(name.clone(), value);
    }
    Ok(())
}

/// One property value from its JSON form and `@odata.type` annotation. Without
/// an annotation the JSON type decides: string, boolean, an integral number that
/// fits Int32, otherwise Double.
pub fn value_from_json(json: &Value, annotation: Option<&str>) -> Result<EdmValue, String> {
    let ty = match annotation {
        None => None,
        Some(a) => Some(EdmType::from_odata_name(a).ok_or_else(|| format!("unknown type {a:?}"))?),
    };
    let as_text = || {
        json.as_str()
            .ok_or_else(|| format!("expected a string, got {json}"))
    };
    Ok(match (ty, json) {
        (None | Some(EdmType::String), Value::String(s)) => EdmValue::String(s.clone()),
        (None | Some(EdmType::Boolean), Value::Bool(b)) => EdmValue::Boolean(*b),
        (None, Value::Number(n)) => match n.as_i64().map(i32::try_from) {
            Some(Ok(i)) if !n.is_f64() => EdmValue::Int32(i),
            _ => EdmValue::Double(n.as_f64().ok_or("number out of range")?),
        },
        (Some(EdmType::Int32), Value::Number(n)) => EdmValue::Int32(
            n.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| format!("{n} is not an Int32"))?,
        ),
        (Some(EdmType::Int64), _) => EdmValue::Int64(
            as_text()?
                .parse()
                .map_err(|_| format!("{json} is not an Int64"))?,
        ),
        (Some(EdmType::Double), Value::Number(n)) => {
            EdmValue::Double(n.as_f64().ok_or("number out of range")?)
        }
        (Some(EdmType::Double), Value::String(s)) => EdmValue::Double(match s.as_str() {
            "NaN" => f64::NAN,
            "Infinity" | "INF" => f64::INFINITY,
            "-Infinity" | "-INF" => f64::NEG_INFINITY,
            other => other
                .parse()
                .map_err(|_| format!("{other:?} is not a Double"))?,
        }),
        (Some(EdmType::DateTime), _) => {
            EdmValue::DateTime(parse_datetime(as_text()?).map_err(|e| e.0)?)
        }
        (Some(EdmType::Guid), _) => EdmValue::Guid(
            as_text()?
                .parse()
                .map_err(|_| format!("{json} is not a Guid"))?,
        ),
        (Some(EdmType::Binary), _) => EdmValue::Binary(
            STANDARD
                .decode(as_text()?)
                .map_err(|_| format!("{json} is not base64"))?,
        ),
        (ty, json) => return Err(format!("{json} does not fit type {ty:?}")),
    })
}

/// An ISO 8601 DateTime in UTC, with any number of fractional digits.
pub fn parse_datetime(s: &str) -> Result<DateTime<Utc>, DecodeError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| DecodeError(format!("{s:?} is not a DateTime")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips_through_json() {
        let t = super::super::value::from_ticks(16_000_000_000_000_001);
        let values = [
            EdmValue::String("it's".into()),
            EdmValue::Binary(vec![0, 1, 255]),
            EdmValue::Boolean(true),
            EdmValue::DateTime(t),
            EdmValue::Double(2.0),
            EdmValue::Double(-0.5),
            EdmValue::Double(-0.0),
            EdmValue::Double(f64::NAN),
            EdmValue::Double(f64::INFINITY),
            EdmValue::Guid(uuid::Uuid::from_u128(7)),
            EdmValue::Int32(i32::MIN),
            EdmValue::Int64(i64::MAX),
        ];
        for v in values {
            let (json, ty) = value_to_json(&v);
            // Through text, as on the wire.
            let json: Value = serde_json::from_str(&json.to_string()).unwrap();
            assert_eq!(value_from_json(&json, ty).unwrap(), v);
        }
        assert!(value_from_json(&Value::from(5), Some("Edm.Nope")).is_err());
        let obj = serde_json::json!({
            "PartitionKey": "p", "RowKey": "r", "Timestamp": "2026-01-01T00:00:00Z",
            "odata.etag": "W/\"x\"", "Gone": null, "Here": 1,
        });
        let e = entity_from_json(obj.as_object().unwrap(), None).unwrap();
        assert_eq!(e.entity.properties.keys().collect::<Vec<_>>(), ["Here"]);
        assert!(value_from_json(&Value::from("x"), Some("Edm.Int64")).is_err());
    }

    #[test]
    fn annotations_only_where_json_loses_the_type() {
        assert_eq!(value_to_json(&EdmValue::Int32(5)), (Value::from(5), None));
        assert_eq!(
            value_to_json(&EdmValue::Int64(i64::MAX)),
            (Value::String(i64::MAX.to_string()), Some("Edm.Int64"))
        );
        assert_eq!(
            value_to_json(&EdmValue::Double(2.0)),
            (Value::from(2.0), Some("Edm.Double"))
        );
        assert_eq!(
            value_to_json(&EdmValue::Double(f64::NEG_INFINITY)),
            (Value::String("-Infinity".into()), Some("Edm.Double"))
        );
    }
}
