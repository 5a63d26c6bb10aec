//! Reading a policy set, its schema, entities and tool list, and refusing what does not hold
//! together: every refusal is a [`CedarError`] naming the file and, where Cedar gives one, the
//! line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use cedar_policy::{Entities, EntityUid, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use serde_json::Value;

use super::actions::{ActionPolicies, by_action};
use super::evaluate::chain;
use super::mapping::Names;
use super::remedy::{AnnotationError, Remedies};
use crate::error::{CedarError, Diagnostic};

/// Where a text came from: a file, or a name the application gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// Read from this file (read again on reload).
    File(PathBuf),
    /// Given as text under this name (the same text on reload).
    Text {
        /// The name diagnostics show.
        name: String,
        /// The text.
        text: String,
    },
}

impl Source {
    /// The name diagnostics show.
    pub fn name(&self) -> String {
        match self {
            Source::File(path) => path.display().to_string(),
            Source::Text { name, .. } => name.clone(),
        }
    }

    fn read(&self) -> Result<String, CedarError> {
        match self {
            Source::File(path) => std::fs::read_to_string(path).map_err(|error| CedarError::Read {
                file: path.display().to_string(),
                reason: error.to_string(),
            }),
            Source::Text { text, .. } => Ok(text.clone()),
        }
    }
}

/// What a [`CedarPolicy`](super::CedarPolicy) reads, kept so a reload reads it again.
#[derive(Debug, Clone, Default)]
pub(super) struct Sources {
    pub policies: Vec<Source>,
    pub schema: Option<Source>,
    pub entities: Option<Source>,
    pub tools: Option<Source>,
    /// Folders listed again at every load (`*.cedar`, `schema.cedarschema`, `entities.json`,
    /// `tools.json`), so a policy file added or removed is seen by the next reload.
    pub directories: Vec<PathBuf>,
}

impl Sources {
    /// These sources with every folder listed now; a source given by itself wins over a
    /// folder's file of the same role.
    fn resolved(&self) -> Result<Sources, CedarError> {
        let mut resolved = Sources {
            directories: Vec::new(),
            ..self.clone()
        };
        for dir in &self.directories {
            let found = directory(dir)?;
            resolved.policies.extend(found.policies);
            resolved.schema = resolved.schema.or(found.schema);
            resolved.entities = resolved.entities.or(found.entities);
            resolved.tools = resolved.tools.or(found.tools);
        }
        Ok(resolved)
    }

    /// The content of every file these sources name now, hashed (a missing file hashes as
    /// `None`): a reload is due when it changes.
    pub fn fingerprint(&self) -> Vec<(PathBuf, Option<[u8; 32]>)> {
        self.resolved()
            .map(|resolved| resolved.file_hashes())
            .unwrap_or_default()
    }

    /// The hash of every file these (resolved) sources name.
    fn file_hashes(&self) -> Vec<(PathBuf, Option<[u8; 32]>)> {
        use sha2::Digest;
        let files = self
            .policies
            .iter()
            .chain(&self.schema)
            .chain(&self.entities)
            .chain(&self.tools);
        files
            .filter_map(|source| match source {
                Source::File(path) => {
                    let hash = std::fs::read(path)
                        .ok()
                        .map(|b| sha2::Sha256::digest(b).into());
                    Some((path.clone(), hash))
                }
                Source::Text { .. } => None,
            })
            .collect()
    }
}

/// How many principals' stores a loaded set keeps: at most 256, and fewer for a large
/// entities file, so the copies hold at most about 200,000 entities in all.
fn principals_cached(entities: &Entities) -> usize {
    let count = entities.iter().count();
    (200_000 / (count + 1)).clamp(8, 256)
}

/// A loaded, validated set: what one evaluation reads.
pub(super) struct Loaded {
    pub policies: PolicySet,
    pub schema: Schema,
    pub names: Names,
    /// The entities file's entities plus the schema's action entities.
    pub entities: Entities,
    pub remedies: Remedies,
    /// The rate limits the permit policies name (`@rate_limit`).
    pub limits: super::limits::SetLimits,
    /// Input schemas by tool name, from the tool list, when one was given.
    pub tools: Option<HashMap<String, Value>>,
    /// The actions the schema declares, each with the policies that can apply to it: a
    /// request for any other action is denied.
    pub actions: HashMap<EntityUid, ActionPolicies>,
    /// The context shapes the schema accepted, by action (see `super::shape`).
    pub shapes: super::shape::AcceptedShapes,
    /// Stores with one principal added, by principal (see `evaluate::principal_entities`).
    pub principals: quick_cache::sync::Cache<Vec<u8>, Arc<Entities>>,
    /// The files' content when they were read (taken before reading them, so a change made
    /// while loading is seen by the next check).
    pub fingerprint: Vec<(PathBuf, Option<[u8; 32]>)>,
    /// The set's version: the first 12 hex digits of a SHA-256 over the files' hashes, in
    /// order (the same files give the same version on every replica).
    pub version: Arc<str>,
}

/// The version of a set read from files with these hashes.
fn version_of(fingerprint: &[(PathBuf, Option<[u8; 32]>)]) -> Arc<str> {
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    for (_, hash) in fingerprint {
        match hash {
            Some(hash) => digest.update(hash),
            None => digest.update([0u8]),
        }
    }
    let digest = digest.finalize();
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    Arc::from(hex)
}

/// Line and column (from 1) of byte `offset` in `text`.
fn position(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |n| before.len() - n - 1)
        + 1;
    (line, column)
}

/// A diagnostic for a Cedar error about `text`, placed at its first label.
fn diagnostic(
    file: &str,
    text: &str,
    policy: Option<&PolicyId>,
    error: &dyn miette::Diagnostic,
) -> Diagnostic {
    let offset = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map(|l| l.offset());
    let (line, column) = offset.map(|o| position(text, o)).unzip();
    let mut message = error.to_string();
    if let Some(help) = error.help() {
        message.push_str(&format!(" ({help})"));
    }
    Diagnostic {
        file: file.to_owned(),
        line,
        column,
        policy: policy.map(ToString::to_string),
        message,
    }
}

/// Each policy's file name and the file's text, for diagnostics.
type Texts = HashMap<PolicyId, (String, String)>;

/// Parses every policy file; ids are `<file>#<n>` unless a policy carries `@id("…")`.
fn parse_policies(sources: &[Source]) -> Result<(PolicySet, Texts), CedarError> {
    if sources.is_empty() {
        return Err(CedarError::Missing("at least one policy file or text"));
    }
    let mut set = PolicySet::new();
    let mut origin = HashMap::new();
    let mut problems = Vec::new();
    for source in sources {
        let (name, text) = (source.name(), source.read()?);
        let parsed = match PolicySet::from_str(&text) {
            Ok(parsed) => parsed,
            Err(errors) => {
                problems.extend(errors.iter().map(|e| diagnostic(&name, &text, None, e)));
                continue;
            }
        };
        if parsed.templates().next().is_some() {
            problems.push(Diagnostic {
                file: name.clone(),
                line: None,
                column: None,
                policy: None,
                message: "policy templates need links, which this policy does not take".into(),
            });
            continue;
        }
        for (index, policy) in parsed.policies().enumerate() {
            let id = policy
                .annotation("id")
                .map_or_else(|| format!("{name}#{index}"), str::to_owned);
            let id = PolicyId::new(id);
            if let Err(error) = set.add(policy.new_id(id.clone())) {
                problems.push(diagnostic(&name, &text, Some(&id), &error));
                continue;
            }
            origin.insert(id, (name.clone(), text.clone()));
        }
    }
    if problems.is_empty() {
        Ok((set, origin))
    } else {
        Err(CedarError::Parse(problems))
    }
}

/// The namespace that declares `User` and `McpServer`.
fn names(schema: &Schema, file: &str) -> Result<Names, CedarError> {
    let users: Vec<_> = schema
        .entity_types()
        .filter(|t| t.basename() == "User")
        .collect();
    let [user] = users.as_slice() else {
        return Err(CedarError::Schema {
            file: file.to_owned(),
            message: "it must declare exactly one entity type User (the principal)".into(),
        });
    };
    let namespace = user.namespace();
    let names = Names::new(namespace.clone());
    let server = names.type_name("McpServer");
    if !schema.entity_types().any(|t| t.to_string() == server) {
        return Err(CedarError::Schema {
            file: file.to_owned(),
            message: format!("it must declare the entity type {server} beside User"),
        });
    }
    Ok(names)
}

/// Parses the schema `text` read from `file`.
fn parse_schema(file: String, text: &str) -> Result<Schema, CedarError> {
    Schema::from_cedarschema_str(text)
        .map(|(schema, _warnings)| schema)
        .map_err(|error| {
            let d = diagnostic(&file, text, None, &error);
            CedarError::Schema {
                file,
                message: match d.line {
                    Some(line) => format!("line {line}: {}", d.message),
                    None => d.message,
                },
            }
        })
}

fn validate(set: &PolicySet, schema: &Schema, origin: &Texts) -> Result<(), CedarError> {
    let result = Validator::new(schema.clone()).validate(set, ValidationMode::Strict);
    if result.validation_passed() {
        return Ok(());
    }
    let problems = result
        .validation_errors()
        .map(|error| {
            let id = error.policy_id();
            let (file, text) = origin
                .get(id)
                .map_or(("?", ""), |(f, t)| (f.as_str(), t.as_str()));
            diagnostic(file, text, Some(id), error)
        })
        .collect();
    Err(CedarError::Validation(problems))
}

fn parse_entities(source: Option<&Source>, schema: &Schema) -> Result<Entities, CedarError> {
    let actions = schema
        .action_entities()
        .map_err(|error| CedarError::Schema {
            file: "schema".into(),
            message: error.to_string(),
        })?;
    let Some(source) = source else {
        return Ok(actions);
    };
    let (file, text) = (source.name(), source.read()?);
    let refuse = |message: String| CedarError::Entities {
        file: file.clone(),
        message,
    };
    let parsed = Entities::from_json_str(&text, Some(schema)).map_err(|e| refuse(chain(&e)))?;
    let all = parsed.into_iter().chain(actions);
    Entities::from_entities(all, Some(schema)).map_err(|e| refuse(chain(&e)))
}

/// Input schemas by tool name from a `tools/list` result (or its JSON-RPC response, or a bare
/// array of tools).
fn parse_tools(source: &Source) -> Result<HashMap<String, Value>, CedarError> {
    let (file, text) = (source.name(), source.read()?);
    let refuse = |message: &str| CedarError::Tools {
        file: file.clone(),
        message: message.to_owned(),
    };
    let value: Value = serde_json::from_str(&text).map_err(|e| refuse(&e.to_string()))?;
    let tools = value
        .get("result")
        .unwrap_or(&value)
        .get("tools")
        .or(Some(&value))
        .and_then(Value::as_array)
        .ok_or_else(|| refuse("expected a tools/list result: {\"tools\": [...]}"))?;
    let mut by_name = HashMap::new();
    for tool in tools {
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| refuse("a tool without a name"))?;
        let schema = tool.get("inputSchema").cloned().unwrap_or(Value::Null);
        if by_name.insert(name.to_owned(), schema).is_some() {
            return Err(refuse(&format!("tool {name:?} is listed twice")));
        }
    }
    Ok(by_name)
}

/// Reads and checks everything; nothing is kept unless all of it holds.
pub(super) fn load(sources: &Sources) -> Result<Loaded, CedarError> {
    let sources = &sources.resolved()?;
    let fingerprint = sources.file_hashes();
    let schema_source = sources
        .schema
        .as_ref()
        .ok_or(CedarError::Missing("a schema"))?;
    // Read once: the schema Cedar parses and the text the actions are read from are the same.
    let schema_text = schema_source.read()?;
    let schema = parse_schema(schema_source.name(), &schema_text)?;
    let names = names(&schema, &schema_source.name())?;
    let (policies, texts) = parse_policies(&sources.policies)?;
    validate(&policies, &schema, &texts)?;
    let annotation = |(id, error): (PolicyId, AnnotationError)| {
        let file = texts.get(&id).map_or("?", |(file, _)| file.as_str());
        CedarError::Annotation(Diagnostic {
            file: file.to_owned(),
            line: None,
            column: None,
            policy: Some(id.to_string()),
            message: error.to_string(),
        })
    };
    let remedies = Remedies::compile(&policies).map_err(annotation)?;
    let limits = super::limits::SetLimits::compile(&policies).map_err(annotation)?;
    let entities = parse_entities(sources.entities.as_ref(), &schema)?;
    let tools = sources.tools.as_ref().map(parse_tools).transpose()?;
    let file = schema_source.name();
    let actions = by_action(&schema, &schema_text, &file, &names, &policies, &entities)?;
    let cached = principals_cached(&entities);
    Ok(Loaded {
        policies,
        schema,
        names,
        entities,
        remedies,
        limits,
        tools,
        actions,
        shapes: super::shape::AcceptedShapes::new(),
        principals: quick_cache::sync::Cache::new(cached),
        version: version_of(&fingerprint),
        fingerprint,
    })
}

/// The files a directory holds, by the convention `--cedar DIR` documents.
pub(super) fn directory(dir: &Path) -> Result<Sources, CedarError> {
    let read_dir = std::fs::read_dir(dir).map_err(|error| CedarError::Read {
        file: dir.display().to_string(),
        reason: error.to_string(),
    })?;
    let mut policies: Vec<PathBuf> = read_dir
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "cedar"))
        .collect();
    policies.sort();
    let optional = |name: &str| {
        let path = dir.join(name);
        path.exists().then_some(Source::File(path))
    };
    Ok(Sources {
        policies: policies.into_iter().map(Source::File).collect(),
        schema: Some(Source::File(dir.join("schema.cedarschema"))),
        entities: optional("entities.json"),
        tools: optional("tools.json"),
        directories: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_from_one() {
        assert_eq!(position("ab\ncd", 0), (1, 1));
        assert_eq!(position("ab\ncd", 4), (2, 2));
        assert_eq!(position("ab", 99), (1, 3));
    }
}
