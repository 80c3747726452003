// tests/scenario/scenario_test.cpp — placeholder
