// tests/scenario/bad_scenarios_test.cpp — placeholder
