//! What a workflow step's handler reads of the steps it comes after
//! ([`JobContext::dependencies`](crate::JobContext::dependencies)).

use serde::de::DeserializeOwned;

use dq_core::workflow::{StepInfo, StepState};
use dq_core::{Error, JobId, Result, Topic};

/// The steps a workflow step comes after, as they ended: each one's value or error. Empty for
/// a job that is not a workflow step.
///
/// ```
/// # fn f(deps: dq_runtime::Dependencies) -> dq_core::Result<()> {
/// #[derive(serde::Deserialize)]
/// struct Charge { receipt: String }
/// let charge: Charge = deps.value("charge")?;
/// if deps.all_succeeded() { /* ship */ }
/// # let _ = charge.receipt; Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Dependencies {
    workflow: Option<String>,
    steps: Vec<Dependency>,
}

/// One step a workflow step comes after.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Dependency {
    /// Its name in the workflow.
    pub name: String,
    /// Its job's topic.
    pub topic: Topic,
    /// Its job's id.
    pub id: JobId,
    /// How it ended: [`StepState::Succeeded`], or (for a step that runs
    /// [`OnFailure::Run`](dq_core::workflow::OnFailure::Run)) `Failed` or `Cancelled`.
    pub state: StepState,
    /// What its handler returned (JSON), when it succeeded with a value.
    pub value: Option<Vec<u8>>,
    /// The error that killed it, when it failed.
    pub error: Option<String>,
}

impl Dependency {
    fn from_step(step: &StepInfo) -> Dependency {
        Dependency {
            name: step.name.clone(),
            topic: step.topic.clone(),
            id: step.id.clone(),
            state: step.state,
            value: step.value.clone(),
            error: step.error.clone(),
        }
    }

    /// Whether it succeeded.
    pub fn succeeded(&self) -> bool {
        self.state == StepState::Succeeded
    }

    /// Its value decoded as `T`; an error that says why when it did not succeed, returned no
    /// value, or returned another type.
    pub fn value<T: DeserializeOwned>(&self) -> Result<T> {
        let location = format!(
            "the value of step {:?} (job {}:{})",
            self.name, self.topic, self.id
        );
        let Some(json) = self.value.as_deref().filter(|_| self.succeeded()) else {
            let reason = match (self.state, &self.error) {
                (StepState::Succeeded, _) => "its handler returned no value".to_owned(),
                (StepState::Failed, Some(e)) => format!("it failed: {e}"),
                (state, _) => format!("it is {}", state.as_str()),
            };
            return Err(Error::Malformed { location, reason });
        };
        serde_json::from_slice(json).map_err(|e| Error::Malformed {
            location,
            reason: format!(
                "it does not decode as {}: {e} (its handler returned another type?)",
                std::any::type_name::<T>()
            ),
        })
    }
}

impl Dependencies {
    /// The dependencies of step `step` of a workflow read from the store.
    pub(crate) fn of(flow: &dq_core::workflow::WorkflowInfo, step: &str) -> Dependencies {
        let steps = flow
            .step(step)
            .map(|me| {
                me.after
                    .iter()
                    .filter_map(|(name, _)| flow.step(name))
                    .map(Dependency::from_step)
                    .collect()
            })
            .unwrap_or_default();
        Dependencies {
            workflow: Some(flow.id.clone()),
            steps,
        }
    }

    /// The workflow the job is a step of (`None`: it is not a step).
    pub fn workflow(&self) -> Option<&str> {
        self.workflow.as_deref()
    }

    /// The dependency `name`.
    pub fn get(&self, name: &str) -> Option<&Dependency> {
        self.steps.iter().find(|d| d.name == name)
    }

    /// Every dependency, in the order the step named them.
    pub fn iter(&self) -> impl Iterator<Item = &Dependency> {
        self.steps.iter()
    }

    /// Whether every dependency succeeded (a step that runs after a failure sees `false`).
    pub fn all_succeeded(&self) -> bool {
        self.steps.iter().all(Dependency::succeeded)
    }

    /// The value of dependency `name` decoded as `T` ([`Dependency::value`]); an error when
    /// the step comes after no step of that name.
    pub fn value<T: DeserializeOwned>(&self, name: &str) -> Result<T> {
        self.get(name)
            .ok_or_else(|| Error::Malformed {
                location: format!(
                    "the dependencies of workflow {:?}",
                    self.workflow.as_deref().unwrap_or("")
                ),
                reason: format!("the step comes after no step named {name:?}"),
            })?
            .value()
    }
}
