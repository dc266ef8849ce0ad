"""The live web view of a running cluster (`txnsim ui`): a Starlette app, a sampler, one page."""
