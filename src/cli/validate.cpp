// src/cli/validate.cpp — placeholder
