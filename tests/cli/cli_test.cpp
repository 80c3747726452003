// tests/cli/cli_test.cpp — placeholder
