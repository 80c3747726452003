// tests/report/report_test.cpp — placeholder
