module github.com/dflash/dflash

go 1.26
