//! The precedence every inherited stage setting follows, written once: the stage's own value,
//! else its definition's (`uses`), else the pipeline's `[defaults]`.
//!
//! A lookup returns the value together with the layer and the file it came from, because a
//! definition's `stage.toml` is a different file from the pipeline: a bad `retries` written in
//! `stage.toml` must be reported with `stage.toml`'s path, line and snippet, not at the same
//! byte offset of the pipeline file.

use std::ops::Range;
use std::sync::Arc;

use toml::Spanned;

use crate::diag::{Diagnostic, Source};
use crate::spec::RawStage;

/// Which layer a setting came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    Stage,
    Definition,
    Defaults,
}

#[derive(Clone, Copy)]
struct Layer<'a> {
    raw: &'a RawStage,
    origin: Origin,
    source: &'a Arc<Source>,
}

/// A stage's layers, highest precedence first.
pub(crate) struct Layers<'a> {
    layers: Vec<Layer<'a>>,
}

/// A value found in one layer, with the file it was written in.
pub(crate) struct Found<'a, T> {
    pub value: &'a T,
    pub origin: Origin,
    pub source: &'a Arc<Source>,
}

impl<'a> Layers<'a> {
    /// `pipeline` is the file of the stage and of `[defaults]`; a definition brings its own.
    pub fn new(
        stage: &'a RawStage,
        pipeline: &'a Arc<Source>,
        definition: Option<(&'a RawStage, &'a Arc<Source>)>,
        defaults: Option<&'a RawStage>,
    ) -> Layers<'a> {
        let mut layers = vec![Layer {
            raw: stage,
            origin: Origin::Stage,
            source: pipeline,
        }];
        if let Some((raw, source)) = definition {
            layers.push(Layer {
                raw,
                origin: Origin::Definition,
                source,
            });
        }
        if let Some(raw) = defaults {
            layers.push(Layer {
                raw,
                origin: Origin::Defaults,
                source: pipeline,
            });
        }
        Layers { layers }
    }

    /// The first layer that sets the key `get` reads.
    pub fn find<T>(&self, get: impl Fn(&'a RawStage) -> Option<&'a T>) -> Option<Found<'a, T>> {
        self.layers.iter().find_map(|l| {
            get(l.raw).map(|value| Found {
                value,
                origin: l.origin,
                source: l.source,
            })
        })
    }

    /// The value of a key without a span (`cpus`, `user`, ...), by the same precedence.
    pub fn value<T: Clone + 'a>(&self, get: impl Fn(&'a RawStage) -> Option<&'a T>) -> Option<T> {
        self.find(get).map(|f| f.value.clone())
    }

    /// The layers lowest precedence first, for settings that merge (`vars`, `pass_env`), where
    /// a later layer overrides or extends an earlier one.
    pub fn merge_order(&self) -> impl Iterator<Item = &'a RawStage> + '_ {
        self.layers.iter().rev().map(|l| l.raw)
    }

    /// [`Layers::merge_order`] with the file each layer was written in, for errors about a
    /// merged setting's entries.
    pub fn merge_order_sourced(
        &self,
    ) -> impl Iterator<Item = (&'a RawStage, &'a Arc<Source>)> + '_ {
        self.layers.iter().rev().map(|l| (l.raw, l.source))
    }
}

impl<T> Found<'_, T> {
    /// An error at `span` inside the file this value came from.
    pub fn error_at(&self, span: Range<usize>, msg: impl Into<String>) -> Diagnostic {
        self.source.error(Some(span), msg)
    }
}

impl<'a, T> Found<'a, Spanned<T>> {
    pub fn get(&self) -> &'a T {
        self.value.get_ref()
    }

    /// An error pointing at this value, in the file it came from.
    pub fn error(&self, msg: impl Into<String>) -> Diagnostic {
        self.error_at(self.value.span(), msg)
    }
}
