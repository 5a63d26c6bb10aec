//! `context.gate` as a Cedar record, made from the same fields as its JSON
//! ([`gate_fields`](super::mapping::gate_fields)), and kept built.
//!
//! The record's fields take few values: two eras, three phases, the protocol versions the layer
//! supports (or none), three flags, and an approver only in phase approval. Every record
//! without an approver and with a supported version (or none) is built once per process and
//! then handed out as a clone, which shares the built record (Cedar keeps a record's members
//! behind one reference count). Any other record (an approver's name, a version the layer
//! does not know) is built for its request. Which record is kept where is computed from the
//! fields themselves ([`kept_index`]), so two requests share a record only when every field is
//! the same. The table is fixed in size: nothing a caller sends makes it grow.

use std::sync::OnceLock;

use cedar_policy::RestrictedExpression;

use super::mapping::{GateField, era_name, phase_name};
use super::shape::Shape;
use super::values::Unrepresentable;
use crate::mcp::{Era, SUPPORTED_VERSIONS};
use crate::policy::Phase;

/// The eras and phases as `context.gate` spells them.
const ERAS: [&str; 2] = [era_name(Era::Modern), era_name(Era::Legacy)];
const PHASES: [&str; 3] = [
    phase_name(Phase::Invocation),
    phase_name(Phase::Discovery),
    phase_name(Phase::Approval),
];

/// How many records can be kept: every era, phase, version (or none) and flag; no approver.
const KEPT: usize = ERAS.len() * PHASES.len() * (SUPPORTED_VERSIONS.len() + 1) * 2 * 2 * 2;

/// The records kept built, by [`kept_index`].
static RECORDS: [OnceLock<RestrictedExpression>; KEPT] = [const { OnceLock::new() }; KEPT];

/// `context.gate` as a Cedar record; its shape is written to `shape`.
pub(super) fn gate_record(
    fields: [(&'static str, GateField<'_>); 7],
    shape: &mut Shape,
) -> Result<RestrictedExpression, Unrepresentable> {
    write_shape(&fields, shape);
    let Some(kept) = kept_index(&fields).and_then(|index| RECORDS.get(index)) else {
        return build(fields);
    };
    if let Some(record) = kept.get() {
        return Ok(record.clone());
    }
    let record = build(fields)?;
    // Two requests may build the same record at once; either one is kept.
    Ok(kept.get_or_init(|| record).clone())
}

/// The record's shape (see [`super::shape`]).
fn write_shape(fields: &[(&'static str, GateField<'_>); 7], shape: &mut Shape) {
    shape.open_record();
    for (key, field) in fields {
        shape.key(key);
        match *field {
            GateField::Text(_) => shape.string(),
            GateField::Flag(flag) => shape.bool(flag),
        }
    }
    shape.close_record();
}

/// The record, built with Cedar's typed constructors.
fn build(
    fields: [(&'static str, GateField<'_>); 7],
) -> Result<RestrictedExpression, Unrepresentable> {
    let fields = fields.map(|(key, field)| {
        let value = match field {
            GateField::Text(text) => RestrictedExpression::new_string(text.to_owned()),
            GateField::Flag(flag) => RestrictedExpression::new_bool(flag),
        };
        (key.to_owned(), value)
    });
    RestrictedExpression::new_record(fields).map_err(|_| Unrepresentable::record())
}

/// Where the record of `fields` is kept, or `None` when it is not kept: each field is one digit
/// of a number whose base at that place is how many values the field may take while its
/// record is kept, so different fields give different places.
fn kept_index(fields: &[(&'static str, GateField<'_>); 7]) -> Option<usize> {
    let mut index = 0;
    for (key, field) in fields {
        let (base, digit) = match (*key, *field) {
            (_, GateField::Flag(flag)) => (2, usize::from(flag)),
            ("era", GateField::Text(era)) => (ERAS.len(), ERAS.iter().position(|e| *e == era)?),
            ("phase", GateField::Text(phase)) => {
                (PHASES.len(), PHASES.iter().position(|p| *p == phase)?)
            }
            ("protocol_version", GateField::Text("")) => (SUPPORTED_VERSIONS.len() + 1, 0),
            ("protocol_version", GateField::Text(version)) => (
                SUPPORTED_VERSIONS.len() + 1,
                1 + SUPPORTED_VERSIONS.iter().position(|v| *v == version)?,
            ),
            ("approved_by", GateField::Text("")) => (1, 0),
            _ => return None,
        };
        index = index * base + digit;
    }
    Some(index)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::policy::cedar::values::tests::context_text;

    /// Every set of fields `gate_fields` can make with no approver, in its order.
    fn every_keepable() -> Vec<[(&'static str, GateField<'static>); 7]> {
        let versions = std::iter::once("").chain(SUPPORTED_VERSIONS.iter().copied());
        let mut all = Vec::new();
        for era in ERAS {
            for phase in PHASES {
                for version in versions.clone() {
                    for flags in 0..8u8 {
                        all.push([
                            ("era", GateField::Text(era)),
                            ("phase", GateField::Text(phase)),
                            ("protocol_version", GateField::Text(version)),
                            ("elicitation_form", GateField::Flag(flags & 1 != 0)),
                            ("elicitation_url", GateField::Flag(flags & 2 != 0)),
                            ("tasks", GateField::Flag(flags & 4 != 0)),
                            ("approved_by", GateField::Text("")),
                        ]);
                    }
                }
            }
        }
        all
    }

    #[test]
    fn each_set_of_fields_has_a_place_of_its_own_within_the_table() {
        let all = every_keepable();
        let places: HashSet<usize> = all.iter().filter_map(kept_index).collect();
        assert_eq!(places.len(), all.len(), "two sets of fields share a place");
        assert!(places.iter().all(|&place| place < KEPT));
        assert_eq!(all.len(), KEPT);
    }

    #[test]
    fn an_approver_or_an_unknown_version_is_built_every_time() {
        let mut fields = every_keepable()[0];
        fields[6].1 = GateField::Text("alice");
        assert_eq!(kept_index(&fields), None);
        let mut fields = every_keepable()[0];
        fields[2].1 = GateField::Text("1999-01-01");
        assert_eq!(kept_index(&fields), None);
    }

    /// A kept record is the record built for the same fields, with the same shape; asking
    /// twice gives the kept one.
    #[test]
    fn a_kept_record_is_the_one_built_for_its_fields() {
        let context = |record| context_text("gate", record);
        for fields in every_keepable().into_iter().step_by(7) {
            let (mut first, mut second, mut built) = (Shape::new(), Shape::new(), Shape::new());
            let kept = gate_record(fields, &mut first).unwrap();
            let again = gate_record(fields, &mut second).unwrap();
            let fresh = build(fields).unwrap();
            write_shape(&fields, &mut built);
            assert_eq!(context(kept.clone()), context(fresh));
            assert_eq!(context(again), context(kept));
            assert_eq!((&first, &second), (&built, &built));
        }
        let mut approver = every_keepable()[3];
        approver[6].1 = GateField::Text("alice");
        let record = gate_record(approver, &mut Shape::new()).unwrap();
        assert!(context(record).contains("\"alice\""));
    }
}
