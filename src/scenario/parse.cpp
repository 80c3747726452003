// src/scenario/parse.cpp — placeholder
