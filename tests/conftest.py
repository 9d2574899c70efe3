pytest_plugins = ["tests.predictors.fixtures"]
