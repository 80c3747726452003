// src/report/h5.cpp — placeholder
