//! The values the application registered with `Runtime::builder().state(..)`, which
//! [`State<T>`](crate::State) arguments are cloned from.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// The values registered with `Runtime::builder().state(..)`, one per type.
#[derive(Clone, Default)]
pub struct States {
    values: HashMap<TypeId, (&'static str, Arc<dyn Any + Send + Sync>)>,
}

impl fmt::Debug for States {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.type_names()).finish()
    }
}

impl States {
    /// The value of type `T`, if one was registered.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.values
            .get(&TypeId::of::<T>())
            .and_then(|(_, v)| v.downcast_ref())
    }

    /// Whether a value of type `T` was registered.
    pub fn contains<T: 'static>(&self) -> bool {
        self.values.contains_key(&TypeId::of::<T>())
    }

    /// Whether nothing was registered.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The registered types' names, sorted.
    pub fn type_names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.values.values().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names
    }

    /// Registers `value`; `Err` with the type's name when one of its type was already there
    /// (it is then replaced).
    pub(crate) fn insert<T: Clone + Send + Sync + 'static>(
        &mut self,
        value: T,
    ) -> Result<(), &'static str> {
        let name = std::any::type_name::<T>();
        match self
            .values
            .insert(TypeId::of::<T>(), (name, Arc::new(value)))
        {
            None => Ok(()),
            Some(_) => Err(name),
        }
    }
}
