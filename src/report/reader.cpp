// src/report/reader.cpp — placeholder
