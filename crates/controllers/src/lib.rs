//! `metacontroller-controllers`: the CompositeController and DecoratorController
//! reconcilers: claim/adopt, child management, update strategies, revisions, finalizers.
