//! The one decision point: every question the policy is asked goes through [`Judge::judge`].
//!
//! Threat: a decision made in two places is two decisions, and the one a log, a counter or a
//! limit does not see is the one that lets a request through. So the judge alone builds the
//! [`Evaluation`], runs the policy inside its containment (a panic or a timeout is a refusal,
//! never an allow), hands the typed [`Ruling`] to the phase that asked (which says how it is
//! answered: [`Express`]), and then tells every [`Observer`] what was decided and said, the
//! decision log first. Every phase comes here: an invocation (and each URI of a
//! `subscriptions/listen`), each listed entry, and a held call re-judged before it runs.

mod event;
mod observe;
mod outcome;
mod request_id;
mod shadow;

use std::borrow::Cow;
use std::sync::Arc;

pub(crate) use event::DecisionEvent;
pub(crate) use event::micros;
#[cfg_attr(
    not(feature = "metrics"),
    allow(
        unused_imports,
        reason = "the seam metrics (feature `metrics`) and limits hang on; tests use it too"
    )
)]
pub(crate) use observe::Observer;
pub(crate) use observe::Observers;
pub(crate) use outcome::{DecisionKind, Refusal, RemedyKind, Ruling, Said};
pub(crate) use request_id::RequestId;
pub(crate) use shadow::Verdict;

use crate::auth::Principal;
use crate::limit::{InFlight, Limits};
use crate::mcp::annotations::{ListedTool, ToolAnnotations};
use crate::mcp::{ProtocolContext, Target};
use crate::measure::traced::{KeptSpan, or_none, traced, wanted};
use crate::policy::{
    self, Answered, Approval, Decision, Evaluation, EvaluationData, Phase, Policy,
};
use std::time::{Duration, Instant};

use shadow::Shadowed;

/// What the policy is asked about, and what the decision event names.
pub(crate) struct Case<'a> {
    pub principal: &'a Principal,
    pub method: &'a Cow<'static, str>,
    /// Owned when the asker has no further use for it (a listed entry's): it then moves into
    /// the `Evaluation` instead of being copied there.
    pub target: Cow<'a, Target>,
    pub protocol: &'a ProtocolContext,
    pub phase: Phase,
    /// The client's answer to the layer's own input request, on a retry.
    pub answered: Option<Answered>,
    /// The tool's annotations, as listed.
    pub listed: Option<Arc<ListedTool>>,
    /// The approval of a held call (phase [`Phase::Approval`]).
    pub approval: Option<Approval>,
    /// The HTTP request's extensions, where the question comes from a request (the client's
    /// address, and what outer middleware set).
    pub extensions: Option<&'a http::Extensions>,
}

/// How a phase answers a ruling: what it sends or does (`Then`), and what it said, for the
/// event. Asynchronous: holding a call in a task is part of saying "task".
pub(crate) trait Express {
    /// What the phase goes on with.
    type Then;

    /// Turns the ruling into what the phase does, and what it said.
    fn express(self, ruling: Ruling) -> impl Future<Output = Judged<Self::Then>> + Send;

    /// Keeps the call's place among its principal's calls in flight (a concurrency limit),
    /// taken before the policy was asked, for as long as the call runs. Only an invocation is
    /// given one; this default lets it go at once.
    fn hold(&mut self, place: InFlight) {
        drop(place);
    }
}

/// A ruling expressed: what was said (for the observers) and what the phase goes on with.
pub(crate) struct Judged<T> {
    pub said: Said,
    pub then: T,
}

/// The policy, its time limit, those who watch its decisions, and the request it judges in.
#[derive(Clone, Copy)]
pub(crate) struct Judge<'a> {
    policy: &'a dyn Policy,
    /// A candidate asked beside the policy, never acted on ([`shadow`]).
    shadow: Option<&'a dyn Policy>,
    timeout: Duration,
    observers: &'a Observers,
    request: RequestId,
    /// The rate limits counted before the policy is asked, and the tools the inner server
    /// lists (a tool's name keys a counter only when listed).
    limits: Option<(&'a Limits, &'a ToolAnnotations)>,
    /// Copies the extension types the builder asked `evaluate` to see.
    copies: &'a [crate::policy::ExtensionCopy],
    /// The grant the question was first asked under is revoked: refused unasked.
    withdrawn: bool,
}

impl<'a> Judge<'a> {
    /// A judge asking `policy` (and `shadow` beside it), each question given `timeout`, its
    /// decisions in request `request` told to `observers`.
    pub fn new(
        policy: &'a dyn Policy,
        shadow: Option<&'a dyn Policy>,
        timeout: Duration,
        observers: &'a Observers,
        request: RequestId,
    ) -> Self {
        Self {
            policy,
            shadow,
            timeout,
            observers,
            request,
            limits: None,
            copies: &[],
            withdrawn: false,
        }
    }

    /// The same judge, refusing unasked ([`Ruling::Withdrawn`]) when `withdrawn`: a held
    /// call whose owner was revoked since it was held.
    pub fn withdrawn(mut self, withdrawn: bool) -> Self {
        self.withdrawn = withdrawn;
        self
    }

    /// The same judge, showing `evaluate` the request extensions `copies` copy.
    pub fn seeing(mut self, copies: &'a [crate::policy::ExtensionCopy]) -> Self {
        self.copies = copies;
        self
    }

    /// The same judge, counting invocations on `limits`: the configured ones before the
    /// policy is asked, those the policy names once it has allowed the call.
    pub fn limited(mut self, limits: &'a Limits, tools: &'a ToolAnnotations) -> Self {
        self.limits = Some((limits, tools));
        self
    }

    /// Asks the policy about `case`, lets `express` answer, and writes the one decision
    /// event.
    ///
    /// A function returning an `async move` block, not an `async fn`: an `async fn` copies its
    /// arguments into its body's state beside the originals, and this future is boxed once
    /// per judged request. The [`Evaluation`] is built before the block, so that the case's
    /// parts it takes are not kept in the future too; a ruling made before the policy is asked
    /// (a withdrawn grant, a limit) then drops it unread.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn stores its arguments twice in its future"
    )]
    // Inlined: built in the callee, the future (about 860 bytes) was copied whole twice at
    // the caller's await; it is asked once per call and once per listed entry.
    #[inline(always)]
    pub fn judge<E: Express>(
        &self,
        case: Case<'_>,
        mut express: E,
    ) -> impl Future<Output = E::Then> {
        let Case {
            principal,
            method,
            target,
            protocol,
            phase,
            answered,
            listed,
            approval,
            extensions,
        } = case;
        let has_listed = listed.is_some();
        let evaluation = Evaluation::new(EvaluationData {
            principal: principal.clone(),
            method: method.clone(),
            target: target.into_owned(),
            protocol: crate::policy::Protocol::of(protocol),
            phase,
            answered,
            listed,
            approval,
            explained: std::sync::OnceLock::new(),
            limits: Default::default(),
            client: extensions.and_then(crate::policy::client_address),
            extensions: match extensions {
                Some(from) if !self.copies.is_empty() => crate::policy::copied(from, self.copies),
                _ => http::Extensions::new(),
            },
        });
        async move {
            // No clock is read when no observer reads the latencies (they are then zero).
            let started = self.observers.timed().then(Instant::now);
            let listed = has_listed;
            let asked = Asked {
                principal,
                method,
                target: evaluation.target(),
                phase,
            };
            // A withdrawn grant, then the limits: a revoked owner's held call, a caller past
            // its rate, or with as many calls in flight as it may have, does not reach the
            // policy.
            let mut unasked = self.withdrawn.then_some(Ruling::Withdrawn);
            if unasked.is_none()
                && phase == Phase::Invocation
                && let Some((limits, tools)) = self.limits
                && limits.configured()
            {
                let mut refused = None;
                if limits.rated() {
                    let known = |name: &str| tools.contains(name);
                    let checked = limits.check(principal, method, asked.target, known);
                    refused = counted(Box::pin(checked).await);
                }
                // Rate first: a call the rates refuse takes no place in flight.
                if refused.is_none()
                    && let Some(acquire) = limits.in_flight(principal, method)
                {
                    match Box::pin(acquire).await {
                        Ok(Ok(place)) => express.hold(place),
                        Ok(Err(limited)) => refused = Some(Ruling::Limited(limited)),
                        Err(error) => refused = Some(Ruling::LimitFailed(error)),
                    }
                }
                unasked = refused;
            }
            if let Some(ruling) = unasked {
                let verdict = Verdict::unasked(&ruling);
                let judged = express.express(ruling).await;
                let event = self.event(&asked, listed, verdict, &judged.said, started);
                self.observers.decided(&event);
                return judged.then;
            }
            let span = KeptSpan::new(policy_span(phase));
            let live = async {
                let run = policy::run(self.policy, evaluation.clone(), self.timeout);
                let answer = traced(run, span.span()).await;
                (answer, since(started))
            };
            let (decision, policy_time, candidate) = match self.shadow {
                None => {
                    let (answer, policy_time) = live.await;
                    (answer, policy_time, None)
                }
                // Boxed: a shadow is an operator's trial, and the two policies' futures side
                // by side would double every judgement's future, shadow or not.
                Some(shadow) => {
                    Box::pin(async {
                        let twin = evaluation.twin();
                        let asked = policy::run(shadow, twin.clone(), self.timeout);
                        let ((answer, policy_time), candidate) =
                            futures_util::future::join(live, asked).await;
                        (answer, policy_time, Some((Verdict::of(&candidate), twin)))
                    })
                    .await
                }
            };
            let (verdict, ruling) = ruled(decision);
            // An allowed invocation is counted on the limits the policy named for it.
            let ruling = match (&ruling, self.limits) {
                (Ruling::Allow, Some((limits, tools))) if asked.phase == Phase::Invocation => {
                    let named = evaluation.named_limits();
                    if named.is_empty() {
                        ruling
                    } else {
                        let known = |name: &str| tools.contains(name);
                        let (principal, method, target) =
                            (asked.principal, asked.method, asked.target);
                        let checked = limits.check_named(principal, method, target, known, &named);
                        counted(Box::pin(checked).await).unwrap_or(ruling)
                    }
                }
                _ => ruling,
            };
            spanned(span.get(), &ruling, phase);
            let judged = express.express(ruling).await;
            let event = DecisionEvent {
                explanation: evaluation.explanation(),
                shadow: candidate.as_ref().map(|(verdict, twin)| Shadowed {
                    verdict: *verdict,
                    explanation: twin.explanation(),
                }),
                policy_time,
                ..self.event(&asked, listed, verdict, &judged.said, started)
            };
            self.observers.decided(&event);
            judged.then
        }
    }
}

/// The ruling a limit check comes to: none when the call was counted, else limited, or
/// refused when the store could not count it.
fn counted(
    checked: Result<Option<crate::limit::Limited>, crate::store::StoreError>,
) -> Option<Ruling> {
    match checked {
        Ok(None) => None,
        Ok(Some(limited)) => Some(Ruling::Limited(limited)),
        Err(error) => Some(Ruling::LimitFailed(error)),
    }
}

/// The time since `started`, or zero when there was no start.
fn since(started: Option<Instant>) -> Duration {
    started.map_or(Duration::ZERO, |started| started.elapsed())
}

/// What a decision event names of the question: who asked what, in which phase.
struct Asked<'c> {
    principal: &'c Principal,
    method: &'c Cow<'static, str>,
    target: &'c Target,
    phase: Phase,
}

impl Judge<'_> {
    /// The decision event of `asked`, said as `said`, with no policy's explanation, no shadow
    /// and no policy time (a ruling made before any policy was asked; the policy's path adds
    /// its own).
    fn event<'e>(
        &self,
        asked: &Asked<'e>,
        listed: bool,
        live: Verdict,
        said: &'e Said,
        started: Option<Instant>,
    ) -> DecisionEvent<'e> {
        DecisionEvent {
            request: self.request,
            principal: asked.principal,
            method: asked.method,
            target: asked.target,
            phase: asked.phase,
            live,
            said,
            explanation: None,
            shadow: None,
            listed_tool: match asked.target {
                Target::Tool { name, .. } if listed => Some(name.as_str()),
                _ => None,
            },
            policy_time: Duration::ZERO,
            latency: since(started),
        }
    }
}

/// What the policy answered, as the event's verdict and the ruling the phase expresses.
fn ruled(decision: Result<Decision, policy::PolicyFailure>) -> (Verdict, Ruling) {
    let verdict = Verdict::of(&decision);
    let ruling = match decision {
        Ok(Decision::Allow) => Ruling::Allow,
        Ok(Decision::Ask { message }) => Ruling::Ask { message },
        Ok(Decision::Deny(remediation)) => Ruling::Deny(remediation),
        Ok(Decision::Abstain) => Ruling::Abstain,
        Err(failure) => Ruling::Failed(failure),
    };
    (verdict, ruling)
}

/// The policy call's span, or the empty span when no subscriber wants it.
fn policy_span(phase: Phase) -> tracing::Span {
    if !wanted() {
        return tracing::Span::none();
    }
    or_none(tracing::info_span!(
        target: "mcp_gate::policy",
        "mcp_gate::policy",
        otel.kind = "internal",
        mcp_gate.phase = phase.as_str(),
        mcp_gate.decision = tracing::field::Empty,
        error.type = tracing::field::Empty,
    ))
}

/// The ruling on the policy's span, and on an invocation's request span (the current one).
fn spanned(span: Option<&tracing::Span>, ruling: &Ruling, phase: Phase) {
    let (decision, error) = match ruling {
        Ruling::Allow => (DecisionKind::Allow, None),
        Ruling::Ask { .. } => (DecisionKind::Ask, None),
        Ruling::Deny(_) => (DecisionKind::Deny, Some("denied")),
        Ruling::Abstain => (DecisionKind::Abstain, Some("abstained")),
        Ruling::Failed(_) => (DecisionKind::Refused, Some("policy_failed")),
        Ruling::Limited(_) => (DecisionKind::Limited, Some("rate_limited")),
        Ruling::LimitFailed(_) => (DecisionKind::Refused, Some("limit_store")),
        Ruling::Withdrawn => (DecisionKind::Refused, Some("owner_revoked")),
    };
    if !wanted() {
        // No subscriber wants a span: there is none to record on.
        return;
    }
    let spans = [
        span.cloned(),
        (phase == Phase::Invocation).then(tracing::Span::current),
    ];
    for span in spans.iter().flatten() {
        span.record("mcp_gate.decision", decision.as_str());
        if let Some(error) = error {
            span.record("error.type", error);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::mcp::{ClientCapabilities, Era};

    /// Keeps what it is told of: phase, decision, expressed as.
    #[derive(Default)]
    struct Tally(Mutex<Vec<(&'static str, &'static str, Option<&'static str>)>>);

    impl Observer for Tally {
        fn decided(&self, event: &DecisionEvent<'_>) {
            let said = event.said;
            let row = (
                event.phase(),
                said.decision.as_str(),
                said.expressed_as.map(|e| e.as_str()),
            );
            self.0.lock().expect("not poisoned").push(row);
        }
    }

    /// Says every ruling as a plain decision of its kind.
    struct Plain;

    impl Express for Plain {
        type Then = ();

        async fn express(self, ruling: Ruling) -> Judged<()> {
            let decision = match ruling {
                Ruling::Allow => DecisionKind::Allow,
                Ruling::Ask { .. } => DecisionKind::Ask,
                Ruling::Deny(_) => DecisionKind::Deny,
                Ruling::Abstain => DecisionKind::Abstain,
                Ruling::Failed(_) | Ruling::LimitFailed(_) | Ruling::Withdrawn => {
                    DecisionKind::Refused
                }
                Ruling::Limited(_) => DecisionKind::Limited,
            };
            Judged {
                said: Said::plain(decision),
                then: (),
            }
        }
    }

    #[tokio::test]
    async fn every_decision_reaches_every_observer_once() {
        let tally = Arc::new(Tally::default());
        let mut observers = Observers::default();
        observers.push(tally.clone());
        let deny = crate::policy::deny_all("no");
        let judge = Judge::new(
            &deny,
            None,
            Duration::from_secs(1),
            &observers,
            RequestId::next(),
        );
        let principal = Principal::builder()
            .issuer("https://issuer.example")
            .build()
            .expect("a principal");
        let protocol = ProtocolContext {
            era: Era::Modern,
            protocol_version: None,
            capabilities: ClientCapabilities::default(),
        };
        let method = Cow::Borrowed("tools/call");
        for phase in [Phase::Invocation, Phase::Discovery, Phase::Approval] {
            let case = Case {
                principal: &principal,
                method: &method,
                target: Cow::Owned(Target::None),
                protocol: &protocol,
                phase,
                answered: None,
                listed: None,
                approval: None,
                extensions: None,
            };
            judge.judge(case, Plain).await;
        }
        let seen = tally.0.lock().expect("not poisoned").clone();
        assert_eq!(
            seen,
            [
                ("invocation", "deny", None),
                ("discovery", "deny", None),
                ("approval", "deny", None),
            ]
        );
    }
}
