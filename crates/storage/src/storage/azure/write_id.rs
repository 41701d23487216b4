//! A conditional write's id, stored with the entity it writes, so that a
//! write whose answer was lost can be settled exactly.
//!
//! The problem: a Replace `If-Match` an ETag whose answer is lost
//! is sent again, and the retry meets 412 both when the first attempt landed
//! and when another client's write did. Reading the entity back cannot tell
//! the two apart by its values: two clients that read a counter at 5 both
//! write 6, and only one of them may be told it won. So every such write
//! failed as ambiguous (58000), and a statement, a catalog change or a
//! sequence's next value failed with it, one lost answer in a few hundred.
//!
//! The mechanism: the write carries one more property, [`PROPERTY`], a
//! random id of this attempt (the retry sends the same one). An entity read
//! back with that id was left by this write: it landed. Reads drop the
//! property, so no mapping, raw table or statement sees it; other
//! applications reading the table do (docs/azure.md says so).
//!
//! The rule: the id proves a write landed; its absence proves nothing (the
//! write may have landed and been overwritten since), and the ambiguity
//! stands. Only a Replace carries one: its entity is the whole stored
//! entity, so one at the service's property or size limit goes without,
//! where a Merge's id would count against an entity it cannot see. Inserts
//! and unconditional writes need none: the state they ask for is the same
//! whoever wrote it. The property's name is reserved: a user's property of
//! that name is overwritten by a conditional Replace and never read.

use super::super::entity::{Entity, MAX_ENTITY_BYTES, MAX_PROPERTIES};
use super::super::{EdmValue, IfMatch, WriteOp};

/// The property that holds a conditional write's id.
pub const PROPERTY: &str = "TablesqlWriteId";

/// Gives `op` an id if it is a conditional Replace and its entity has room
/// for one.
pub fn tag(op: &mut WriteOp) {
    let WriteOp::Update(entity, IfMatch::ETag(_)) = op else {
        return;
    };
    let id = EdmValue::String(format!("{:032x}", rand::random::<u128>()));
    if entity.properties.len() >= MAX_PROPERTIES {
        return;
    }
    entity.properties.insert(PROPERTY.to_owned(), id);
    if entity.stored_size() > MAX_ENTITY_BYTES {
        entity.properties.remove(PROPERTY);
    }
}

/// Takes away the id `tag` gave `op`.
pub fn untag(op: &mut WriteOp) {
    if let WriteOp::Update(e, IfMatch::ETag(_)) = op {
        strip(e);
    }
}

/// The id an entity holds, if any.
pub fn of(entity: &Entity) -> Option<&EdmValue> {
    entity.properties.get(PROPERTY)
}

/// Drops the id from an entity read, so nothing above the client sees it.
pub fn strip(entity: &mut Entity) {
    entity.properties.remove(PROPERTY);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{ETag, PartitionKey, RowKey};

    fn entity(properties: usize) -> Entity {
        let mut e = Entity::new(
            PartitionKey::new("p").expect("a key"),
            RowKey::new("r").expect("a key"),
        );
        for i in 0..properties {
            e.properties.insert(format!("P{i}"), EdmValue::Int32(1));
        }
        e
    }

    #[test]
    fn only_a_conditional_replace_with_room_gets_an_id() {
        let etag = || IfMatch::ETag(ETag::from_wire("W/\"1\""));
        let mut update = WriteOp::Update(entity(1), etag());
        tag(&mut update);
        let id = update.entity().and_then(of).cloned();
        assert!(matches!(&id, Some(EdmValue::String(s)) if s.len() == 32));

        let mut other = WriteOp::Update(entity(1), etag());
        tag(&mut other);
        assert_ne!(
            other.entity().and_then(of),
            id.as_ref(),
            "each write its own"
        );
        untag(&mut other);
        assert_eq!(other.entity().and_then(of), None);

        for mut untagged in [
            WriteOp::Merge(entity(1), etag()),
            WriteOp::Update(entity(1), IfMatch::Any),
            WriteOp::Insert(entity(1)),
            WriteOp::InsertOrReplace(entity(1)),
            WriteOp::Update(entity(MAX_PROPERTIES), etag()),
        ] {
            tag(&mut untagged);
            assert_eq!(untagged.entity().and_then(of), None, "{untagged:?}");
        }
    }
}
