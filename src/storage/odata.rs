//! Entities as the service's JSON (`odata=minimalmetadata`): every value whose
//! JSON form would lose its type carries an `@odata.type` annotation.

use serde_json::{Map, Value};

use super::entity::StoredEntity;
use super::value::{EdmValue, format_datetime};

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
    for (name, value) in &e.entity.properties {
        let (json, ty) = value_to_json(value);
        if let Some(ty) = ty {
            obj.insert(format!("{name}@odata.type"), Value::String(ty.to_owned()));
        }
        obj.insert(name.clone(), json);
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

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
